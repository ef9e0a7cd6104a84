"""Prompt versions compared: the numbers on a known set of revisions, flags counted from the
stored lists (a new flag appears by itself, answer_mismatch first), and the dashboard's
table."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from studyqueue.explanations import prompt_versions, revisions
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory
from tests.helpers.admin import DASHBOARD_URL

pytestmark = pytest.mark.django_db


def written(version: str, text: str, flags: list[str], review: str = "unreviewed", **more):  # type: ignore[no-untyped-def]
    return ExplanationRevisionFactory(
        question=StudyQuestionFactory(),
        prompt_version=version,
        prompt_label=f"label {version}",
        text=text,
        flags=flags,
        review_status=review,
        **more,
    )


@pytest.fixture
def two_versions():  # type: ignore[no-untyped-def]
    old = timezone.now() - timedelta(days=2)
    written("aaa", "x" * 100, ["too_short"], "approved", created_at=old, completion_tokens=10)
    written("aaa", "x" * 300, [], "rejected", created_at=old, completion_tokens=30)
    written("aaa", "x" * 200, ["wrong_script", "too_short"], created_at=old)
    written("bbb", "y" * 50, ["answer_mismatch", "truncated"], "approved", tokens_per_second=20.0)
    written("bbb", "y" * 150, ["some_new_flag"], "edited", tokens_per_second=40.0)
    # A reviewer's correction is not the prompt's work.
    correction = written("bbb", "z" * 999, [], "edited", author="ana")
    revisions.make_current(correction)


def test_each_version_numbers(two_versions):
    newest, oldest = prompt_versions.collect()
    assert (newest.prompt_version, oldest.prompt_version) == ("bbb", "aaa")
    assert (oldest.written, oldest.mean_chars, oldest.mean_completion_tokens) == (3, 200, 20)
    assert oldest.flag_shares == [("too_short", 2 / 3), ("wrong_script", 1 / 3)]
    assert (oldest.reviewed, oldest.approval_rate, oldest.rejection_rate) == (2, 0.5, 0.5)
    assert (newest.written, newest.mean_chars, newest.tokens_per_second) == (2, 100, 30)
    # Stored flags are counted as they are: answer_mismatch first, an unknown one last.
    assert newest.flag_shares == [
        ("answer_mismatch", 0.5),
        ("truncated", 0.5),
        ("some_new_flag", 0.5),
    ]
    assert (newest.reviewed, newest.approved, newest.edited, newest.rejection_rate) == (
        2,
        1,
        1,
        0.0,
    )
    # The newest N only: the last two revisions the LLM wrote are version bbb's.
    (window,) = prompt_versions.collect(newest=2)
    assert (window.prompt_version, window.written, window.approval_rate) == ("bbb", 2, 0.5)


def test_no_review_yet_is_no_rate():
    written("ccc", "text", [])
    (version,) = prompt_versions.collect()
    assert (version.reviewed, version.approval_rate, version.rejection_rate) == (0, None, None)


def cells(page: str, version: str) -> list[str]:
    """The text of each cell of ``version``'s row in the dashboard's prompt-versions table."""
    table = page.split('id="sq-prompt-versions"', 1)[1].split("</table>", 1)[0]
    row = table.split(f'<tr data-version="{version}">', 1)[1].split("</tr>", 1)[0]
    found = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [" ".join(re.sub(r"<[^>]+>", "", cell).split()) for cell in found]


def test_the_dashboard_shows_the_table(two_versions, admin_client):
    page = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'id="sq-prompt-versions"' in page
    assert page.index('data-version="bbb"') < page.index('data-version="aaa"')  # newest first
    assert page.index('data-flag="answer_mismatch"') < page.index('data-flag="truncated"')
    assert "label aaa" in page
    # Labels for the known flags; a flag this version does not know, as it is.
    bbb = cells(page, "bbb")
    assert bbb[1:3] == ["2", "answer mismatch 50 %, truncated 50 %, some_new_flag 50 %"]
    # Written, flags, characters, tokens, tokens/s, reviewed, approved, rejected, edited.
    assert cells(page, "aaa")[1:10] == [
        "3", "too short 67 %, wrong script 33 %", "200", "20", "—", "2", "50 %", "50 %", "0",
    ]  # fmt: skip
