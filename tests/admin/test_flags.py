"""Flags people can read: labelled badges with their meaning on hover in
lists and pages, the stated answer beside the key; no raw JSON, no red cross for "no"."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.template import Context, Template
from django.urls import reverse

from studyqueue.admin.flags import FLAG_COLOURS, flag_badges
from studyqueue.explanations import revisions
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)
from tests.helpers.admin import QUESTIONS_URL

pytestmark = pytest.mark.django_db
REVISIONS_URL = reverse("admin:studyqueue_explanationrevision_changelist")
RED_CROSS = "icon-no.svg"  # Django's boolean icon for False


def _badges(html: str) -> dict[str, str]:
    """Each flag badge on a page: its flag and its hover text."""
    found = re.findall(r'<span class="sq-flag" data-flag="([^"]+)" title="([^"]*)"', html)
    return {flag: unescape(meaning) for flag, meaning in found}


def _explained(flags: list[str], stated: str = "①", **question: object):  # type: ignore[no-untyped-def]
    revision = ExplanationRevisionFactory(
        question=StudyQuestionFactory(**question),
        flags=flags,
        stated_answer=stated,
        finish_reason="stop",
    )
    assert revisions.make_current(revision)
    return revision


def test_every_flag_has_a_colour_a_label_and_a_meaning():
    for flag in revisions.FLAGS:
        assert flag in FLAG_COLOURS and revisions.MEANINGS[flag] and flag.label
    html = str(flag_badges(["answer_mismatch", "truncated"]))
    assert _badges(html) == {
        "answer_mismatch": str(revisions.MEANINGS["answer_mismatch"]),
        "truncated": str(revisions.MEANINGS["truncated"]),
    }
    assert ">answer mismatch</span>" in html and ">truncated</span>" in html


def test_no_flag_is_a_dash_and_an_unknown_flag_shows_its_name():
    assert "sq-flag-none" in flag_badges([]) and "sq-flag-none" in flag_badges(None)
    assert "sq-flag-none" in flag_badges("not a list")  # type: ignore[arg-type]
    assert _badges(flag_badges(["from_a_newer_version"])) == {"from_a_newer_version": ""}
    assert "&lt;b&gt;" in flag_badges(["<b>"]), "a stored name is escaped"


def test_the_template_tag_renders_the_same_badges():
    template = Template("{% load studyqueue_flags %}{% flag_badges flags %}")
    flags = ["wrong_script", "no_answer_stated"]
    assert template.render(Context({"flags": flags})) == flag_badges(flags)


def test_the_question_list_shows_badges_not_json(admin_client):
    _explained(["wrong_script"])
    _explained([])
    html = admin_client.get(QUESTIONS_URL).content.decode()
    assert _badges(html) == {"wrong_script": str(revisions.MEANINGS["wrong_script"])}
    assert '["wrong_script"]' not in html and "[&quot;wrong_script&quot;]" not in html
    assert "sq-flag-none" in html, "the question without a flag shows a dash"


def test_the_question_page_shows_the_stated_answer_beside_the_key(admin_client):
    revision = _explained(
        ["answer_mismatch"], stated="①", text="수도는?", choices=["부산", "서울"], answer="서울"
    )
    url = reverse("admin:studyqueue_studyquestion_change", args=[revision.question_id])
    html = admin_client.get(url).content.decode()
    assert re.search(r'class="sq-stated">①</span> · key: 서울 <span class="sq-flag"', html)
    assert "answer_mismatch" in _badges(html)
    assert RED_CROSS not in html, "not truncated is a word, not a red cross"
    assert "field-answer" in html and "field-stated_answer" in html


def test_the_question_page_without_an_explanation(admin_client):
    question = StudyQuestionFactory(answer="4")
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    assert admin_client.get(url).status_code == 200


def test_the_revision_list_and_page_show_badges_and_the_stated_answer(admin_client):
    old = _explained(["no_answer_stated"], stated="", answer="Seoul")
    new = ExplanationRevisionFactory(question=old.question, flags=[], stated_answer="2")
    assert revisions.make_current(new)
    html = admin_client.get(REVISIONS_URL).content.decode()
    assert "no_answer_stated" in _badges(html)
    assert "none read" in html and "key: Seoul" in html
    assert RED_CROSS not in html, "an older revision is not a fault"
    page = admin_client.get(reverse("admin:studyqueue_explanationrevision_change", args=[old.pk]))
    assert "no_answer_stated" in _badges(page.content.decode())
    inline = admin_client.get(
        reverse("admin:studyqueue_studyquestion_change", args=[old.question_id])
    ).content.decode()
    assert "no_answer_stated" in _badges(inline), "the revision inline shows badges too"


def test_the_job_page_says_no_instead_of_a_red_cross(admin_client):
    job = StudyQuestionJobFactory(status="completed", quality_retried=False)
    html = admin_client.get(
        reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    ).content.decode()
    assert RED_CROSS not in html


def test_the_review_filter_names_flags_by_their_labels(admin_client):
    mismatch = _explained(["answer_mismatch", "truncated"]).question
    unread = _explained(["no_answer_stated"]).question
    _explained([])
    html = admin_client.get(QUESTIONS_URL).content.decode()
    assert "?review=answer_mismatch" in html and ">answer mismatch</a>" in html
    for flag, expected in [("answer_mismatch", [mismatch]), ("no_answer_stated", [unread])]:
        filtered = admin_client.get(QUESTIONS_URL, {"review": flag})  # SQLite and PostgreSQL
        assert list(filtered.context["cl"].result_list) == expected
