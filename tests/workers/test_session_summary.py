"""Session summaries against the real test LLM server: a summary waits for the explanations
of the questions its learner missed and is written after them, checked, noticed; a disputed
key is named under review; explanations that keep failing end it; the claim's wait agrees
with ``transitions.ready``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.models import (
    JobKind,
    KeyAudit,
    SessionSummary,
    StudyQuestion,
    StudyQuestionJob,
    StudySession,
)
from studyqueue.queue import transitions
from studyqueue.sessions import recording, summaries
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quiet(settings, llm_server):
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "VERIFY": False,
        "STEP_CHECK": False,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
    }
    return llm_server


def _questions(n: int) -> list[StudyQuestion]:
    return [
        StudyQuestionFactory(
            external_id=f"q-{i}",
            text=f"What is {i} + 1?",
            choices=[str(i), str(i + 1), str(i + 2)],
            answer=str(i + 1),
        )
        for i in range(1, n + 1)
    ]


def _record(learner: str, choices: list[tuple[str, int]]) -> StudySession:
    return recording.record(recording.check(_line(learner, choices)))[0]


def _drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


def _line(learner: str, choices: list[tuple[str, int]]) -> dict:
    return {
        "external_id": f"s-{learner}",
        "learner": learner,
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:20:00+09:00",
        "answers": [{"question": ref, "chosen": chosen} for ref, chosen in choices],
    }


def test_fifty_summaries_each_written_after_the_explanations_it_needs(quiet, tmp_path):
    _questions(5)
    lines = []
    for n in range(50):
        # Learner n misses question (n % 5) + 1 and, for even n, also question 5.
        missed = {n % 5 + 1} | ({5} if n % 2 == 0 else set())
        lines.append(_line(f"l{n}", [(f"q-{i}", 1 if i in missed else 2) for i in range(1, 6)]))
    path = tmp_path / "sessions.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    call_command("importsessions", str(path), "--enqueue", stdout=StringIO())
    assert StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY).count() == 50
    explanations = StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION)
    assert explanations.count() == 5  # every question was missed by someone
    _drain()
    jobs = StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY)
    assert sorted(jobs.values_list("status", flat=True)) == ["completed"] * 50
    explained_at = dict(explanations.values_list("study_question_id", "completed_at"))
    for job in jobs:
        missed = job.study_session.answers.filter(correct=False)
        needed = [explained_at[pk] for pk in missed.values_list("question_id", flat=True)]
        assert needed and max(needed) <= job.started_at, job
    for session in StudySession.objects.select_related("summary"):
        summary = session.summary
        assert summary is not None, session
        assert summary.flags == []
        assert summary.stated == {
            "right": session.right,
            "total": 5,
            "percent": round(100 * session.right / 5),
        }
        data = summaries.as_json(session)
        assert (data["status"], data["waiting_on"], data["outdated"]) == ("written", "", False)
    notices = StudyQuestionJob.objects.filter(kind=JobKind.SESSION_NOTICE)
    assert sorted(notices.values_list("status", flat=True)) == ["completed"] * 50
    # The prompt gave the model each missed question's explanation and key.
    assert all("Explanation (start):" in prompt for prompt in quiet.summary_prompts)


def test_a_disputed_key_is_under_review_not_taught(quiet):
    _right, disputed = _questions(2)
    StudyQuestion.objects.filter(pk=disputed.pk).update(key_audit=KeyAudit.DISPUTED)
    session = _record("kim", [("q-1", 2), ("q-2", 1)])
    summaries.queue_summaries([session])
    assert not StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).exists()
    _drain()
    (prompt,) = quiet.summary_prompts
    assert "Correct answer: under review" in prompt and "Correct answer: 3" not in prompt
    assert StudySession.objects.get(pk=session.pk).summary is not None


def test_a_summary_from_a_server_without_usage_records_counted_tokens(quiet):
    quiet.configure(stream_usage=False)
    _questions(1)
    session = _record("lee", [("q-1", 2)])
    summaries.queue_summaries([session])
    _drain()
    summary = StudySession.objects.get(pk=session.pk).summary
    assert summary is not None and summary.tokens_counted
    assert summary.completion_tokens and summary.prompt_tokens is None


def test_a_hostile_summary_is_flagged_and_an_edit_after_marks_it_outdated(quiet):
    questions = _questions(2)
    session = _record("kim", [("q-1", 1), ("q-2", 2)])
    quiet.summary_answer = "잘했어요! 1번 문제도 2번 문제도 맞혔어요."
    summaries.queue_summaries([session])
    _drain()
    summary = SessionSummary.objects.get(session=session)
    assert summary.flags == ["no_score_stated"]  # question 1 is named, but not as missed
    quiet.summary_answer = "점수: 2문제 중 2문제. 2번 문제를 틀렸습니다."
    StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY).delete()
    summaries.queue_summaries([session])
    _drain()
    latest = StudySession.objects.get(pk=session.pk).summary
    assert latest.flags == ["score_mismatch", "wrong_question", "missed_not_mentioned"]
    questions[0].answer = "1"
    questions[0].save()
    assert summaries.as_json(StudySession.objects.get(pk=session.pk))["outdated"] is True
    questions[1].delete()
    answers = summaries.answers_of(session)
    assert [a.question_text for a in answers][1] == "What is 2 + 1?"


def test_explanations_that_keep_failing_end_the_summary(quiet, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 2}
    (question,) = _questions(1)
    StudyQuestion.objects.filter(pk=question.pk).update(text="FAULT:400 What is 1 + 1?")
    session = _record("kim", [("q-1", 1)])
    summaries.queue_summaries([session])
    _drain()
    summary_job = StudyQuestionJob.objects.get(kind=JobKind.SESSION_SUMMARY)
    assert (summary_job.status, summary_job.error_code) == ("failed", "explanations_needed")
    assert summary_job.attempts == 2
    assert StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).count() == 2
    assert summaries.as_json(session)["status"] == "failed"
    assert not SessionSummary.objects.exists()


def test_the_claim_waits_as_ready_says(db):
    _questions(1)
    session = _record("kim", [("q-1", 1)])
    summaries.queue_summaries([session])
    summary = StudyQuestionJob.objects.get(kind=JobKind.SESSION_SUMMARY)
    ready = {job.pk for job in transitions.ready()}
    assert summary.pk not in ready
    claimed = transitions.claim(worker_id="w", limit=10)
    assert {job.pk for job in claimed} == ready
    assert {job.kind for job in claimed} <= {"explanation", "key_audit"}
    for job in claimed:
        transitions.complete(job)
    while True:  # the explanation after its key audit
        more = transitions.claim(worker_id="w", limit=10)
        if not more or summary.pk in {job.pk for job in more}:
            break
        for job in more:
            transitions.complete(job)
    assert summary.pk in {job.pk for job in more}


def test_sessions_posted_to_the_api_get_their_summaries(quiet, settings, client):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "API_TOKENS": "t0ken"}
    _questions(3)
    auth = {"HTTP_AUTHORIZATION": "Bearer t0ken"}
    for n in range(3):
        body = json.dumps(_line(f"a{n}", [("q-1", 2), ("q-2", 1), ("q-3", 1 + n % 2)]))
        answer = client.post("/studyqueue/api/sessions", body, "application/json", **auth)
        assert answer.status_code == 201, answer.content
    url = answer.json()["summary_url"]
    assert client.get(url, **auth).json()["status"] in ("waiting", "queued")
    _drain()
    data = client.get(url, **auth).json()
    assert (data["status"], data["flags"], data["right"]) == ("written", [], 1)
    assert data["stated"] == {"right": 1, "total": 3, "percent": 33}
