"""The job page's attempt timeline, through the test client: the attempts the queue recorded,
first to last, with their outcomes, errors, tokens and time to first token."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone, translation

from studyqueue.admin import timeline
from studyqueue.admin.common import ATTEMPT_COLOURS
from studyqueue.models import ATTEMPT_OUTCOMES, ErrorCode, JobAttempt, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.times import short_duration
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db


def page(client, job: StudyQuestionJob) -> str:
    response = client.get(reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def rows(html: str) -> list[str]:
    """The timeline's rows as text, one line each."""
    body = html.split('<table class="sq-timeline">')[1].split("</table>")[0]
    cells = [row.split(">", 1)[1] for row in body.split('<tr class="sq-attempt"')[1:]]
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in cells]


def test_every_outcome_and_a_running_attempt_have_a_badge_colour():
    assert set(ATTEMPT_COLOURS) == {"", *(outcome.value for outcome in ATTEMPT_OUTCOMES)}


def test_a_job_that_failed_twice_then_completed_shows_three_attempts(admin_client):
    job = enqueue(StudyQuestionFactory()).job
    for code, message in ((ErrorCode.LLM_SERVER_ERROR, "502 Bad Gateway"),
                          (ErrorCode.LLM_TIMEOUT, "no reply in 300s")):  # fmt: skip
        (claimed,) = transitions.claim(worker_id="host-a:17:x")
        transitions.fail(claimed, code, message)
        StudyQuestionJob.objects.filter(pk=job.pk).update(run_after=timezone.now())
    (claimed,) = transitions.claim(worker_id="host-b:18:y")
    revision = ExplanationRevisionFactory(
        question_id=job.study_question_id, prompt_tokens=412, completion_tokens=96,
        first_token_ms=230,
    )  # fmt: skip
    transitions.complete(claimed, revision=revision, llm_ms=900)

    shown = rows(page(admin_client, job))
    assert len(shown) == 3
    assert shown[0].startswith("1 ") and "host-a:17:x Retrying llm_server_error" in shown[0]
    assert "502 Bad Gateway" in shown[0] and shown[0].endswith("- -")
    assert "Retrying llm_timeout no reply in 300s" in shown[1]
    assert "host-b:18:y Completed -" in shown[2] and shown[2].endswith("412 → 96 230 ms")
    html = page(admin_client, job)
    assert 'title="LLM server error (5xx)">llm_server_error</code>' in html


@pytest.mark.parametrize(
    "language,shown", [("en", "189 ms"), ("ko", "189밀리초")], ids=["en", "ko"]
)
def test_a_call_under_a_second_shows_in_milliseconds_not_as_0s(admin_client, language, shown):
    job = enqueue(StudyQuestionFactory()).job
    (claimed,) = transitions.claim(worker_id="host-a:17:x")
    transitions.complete(claimed, llm_ms=189)
    started = timezone.now() - timedelta(minutes=1)
    ended = started + timedelta(milliseconds=189.6)
    JobAttempt.objects.filter(job_id=job.pk).update(started_at=started, ended_at=ended)
    StudyQuestionJob.objects.filter(pk=job.pk).update(started_at=started, completed_at=ended)
    headers = {"HTTP_ACCEPT_LANGUAGE": language}
    url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    (row,) = rows(admin_client.get(url, **headers).content.decode())
    assert f" {shown} " in f" {row} ", row
    listed = admin_client.get(reverse("admin:studyqueue_studyquestionjob_changelist"), **headers)
    when = listed.content.decode().split('class="sq-when"')[1].split("</td>")[0]
    assert f"({shown})" in re.sub(r"<[^>]+>", "", when), when
    with translation.override(language):
        assert short_duration(timedelta(seconds=1.5)) == ("1s" if language == "en" else "1초")
        assert short_duration(timedelta(0)) == shown.replace("189", "0")


def test_a_running_attempt_shows_as_running_and_a_long_message_as_an_excerpt(admin_client):
    job = enqueue(StudyQuestionFactory()).job
    (claimed,) = transitions.claim(worker_id="w")
    shown = rows(page(admin_client, job))
    assert len(shown) == 1 and "w Running" in shown[0]
    transitions.release(claimed, code=ErrorCode.LLM_UNAVAILABLE, message="refused " * 100)
    html = page(admin_client, job)
    (shown,) = rows(html)
    assert "Handed back llm_unavailable refused refused" in shown and "…" in shown
    assert ("refused " * 100).strip() in html, "the whole message on hover"


def test_a_job_never_claimed_says_so(admin_client):
    job = enqueue(StudyQuestionFactory()).job
    assert "No attempt recorded yet" in page(admin_client, job)


def test_the_page_shows_only_the_last_attempts(admin_client, monkeypatch):
    monkeypatch.setattr(timeline, "SHOWN", 3)
    job = enqueue(StudyQuestionFactory()).job
    start = timezone.now() - timedelta(hours=1)
    JobAttempt.objects.bulk_create(
        JobAttempt(job=job, number=n, started_at=start, ended_at=start, outcome="released")
        for n in range(1, 6)
    )
    html = page(admin_client, job)
    assert [row.split()[0] for row in rows(html)] == ["3", "4", "5"]
    assert "from #3 on" in html


def test_the_timeline_is_escaped(admin_client):
    job = enqueue(StudyQuestionFactory()).job
    (claimed,) = transitions.claim(worker_id="<b>w</b>")
    transitions.fail(claimed, ErrorCode.LLM_REJECTED, "<script>alert(1)</script>")
    html = page(admin_client, job)
    assert "<script>alert(1)</script>" not in html and "<b>w</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
