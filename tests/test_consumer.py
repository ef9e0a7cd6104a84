"""The consume cycle against a real test LLM server: every fault ends in its documented state."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.utils import timezone

from studyqueue import consumer, queue
from studyqueue.consumer import BREAKER, consume_study_queue
from studyqueue.models import ErrorCode, JobKind, StudyQuestion, StudyQuestionJob
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def cycle(**kwargs) -> consumer.CycleResult:
    kwargs.setdefault("worker_id", "test")
    return async_to_sync(consume_study_queue)(**kwargs)


def enqueue(n: int = 1, **question_fields) -> list[StudyQuestionJob]:
    return [queue.enqueue(StudyQuestionFactory(**question_fields)).job for _ in range(n)]


def job_state(job: StudyQuestionJob) -> tuple:
    job.refresh_from_db()
    return job.status, job.error_code, job.attempts


def test_a_cycle_writes_the_explanation_and_completes_the_job(llm_server):
    (job,) = enqueue(text="What is 2 + 2?", choices=["3", "4"], answer="4")
    result = cycle()
    assert result.claimed == 1 and result.outcomes == {"completed": 1}
    assert job_state(job) == ("completed", "", 1)
    assert (job.llm_model, job.llm_prompt_tokens, job.llm_completion_tokens) == (
        "default_model",
        42,
        7,
    )
    assert job.llm_ms is not None
    question = StudyQuestion.objects.get()
    assert question.explanation == "Because 2 + 2 equals 4."
    assert question.explanation_model == "default_model"
    assert question.explained_at is not None and not question.explanation_truncated
    assert llm_server.stats()["per_question"] == {"What is 2 + 2?": 1}


def test_the_prompt_carries_question_choices_and_answer(llm_server):
    from studyqueue.workers.explanation import build_messages

    question = StudyQuestionFactory(
        text="Capital of France?", choices=["Paris", "Rome"], answer="Paris"
    )
    system, user = build_messages(question)
    assert system["role"] == "system" and user["role"] == "user"
    assert "Capital of France?" in user["content"]
    assert "1. Paris\n2. Rome" in user["content"]
    assert "Correct answer: Paris" in user["content"]
    assert "same language as the question" in user["content"]


def test_a_backlog_drains_in_one_cycle(llm_server):
    jobs = enqueue(5)
    result = cycle()
    assert result.outcomes == {"completed": 5}
    assert result.next_due_in is None
    assert all(job_state(j)[0] == "completed" for j in jobs)
    assert llm_server.stats()["max_active"] == 1


def test_gate_permits_run_jobs_side_by_side(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 3, "BATCH_SIZE": 3}
    llm_server.configure(delay=0.2)
    enqueue(6)
    assert cycle().outcomes == {"completed": 6}
    assert llm_server.stats()["max_active"] == 3


def test_budget_stops_claiming_and_reports_more_ready(llm_server):
    llm_server.configure(delay=0.1)
    enqueue(5)
    result = cycle(budget=0)
    assert result.claimed == 1
    assert result.more_ready


@pytest.mark.parametrize(
    "fault,status,code,attempts",
    [
        ("500", "pending", ErrorCode.LLM_SERVER_ERROR, 1),
        ("malformed", "pending", ErrorCode.LLM_BAD_RESPONSE, 1),
        ("null", "pending", ErrorCode.LLM_EMPTY, 1),
        ("drop", "pending", ErrorCode.LLM_SERVER_ERROR, 1),
        ("400", "failed", ErrorCode.LLM_REJECTED, 1),
    ],
)
def test_job_level_faults(llm_server, fault, status, code, attempts):
    llm_server.configure(fault=fault)
    (job,) = enqueue()
    cycle()
    assert job_state(job) == (status, code, attempts)
    if status == "pending":
        assert job.run_after > timezone.now(), "a retry waits for its backoff"
    assert BREAKER.allows(), "a job-level fault must not pause the queue"


def test_timeout_is_retried_later(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_TIMEOUT_SECONDS": 0.3}
    llm_server.configure(fault="slow", slow_seconds=2)
    (job,) = enqueue()
    cycle()
    assert job_state(job) == ("pending", "llm_timeout", 1)


def test_truncated_reply_is_stored_but_flagged(llm_server):
    llm_server.configure(fault="length")
    (job,) = enqueue()
    cycle()
    assert job_state(job)[0] == "completed"
    question = StudyQuestion.objects.get()
    assert question.explanation and question.explanation_truncated


def test_transient_faults_end_failed_after_max_attempts(llm_server):
    llm_server.configure(fault="500")
    (job,) = enqueue()
    for _ in range(3):
        StudyQuestionJob.objects.filter(pk=job.pk).update(run_after=timezone.now())
        cycle()
    assert job_state(job) == ("failed", "llm_server_error", 3)


@pytest.mark.parametrize("fault", ["refused", "429", "503", "404"])
def test_server_wide_faults_release_jobs_without_burning_attempts(
    llm_server, settings, free_port, fault
):
    if fault == "refused":
        settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"http://127.0.0.1:{free_port}/v1"}
    else:
        llm_server.configure(fault=fault, retry_after="1")
    jobs = enqueue(3)
    result = cycle()
    # The job that failed and the one ready behind it are released; no more are claimed,
    # and the server is not asked again.
    assert result.claimed == 2, "the consumer stops claiming after a server-wide failure"
    assert llm_server.stats()["requests"] == (0 if fault == "refused" else 1)
    assert result.paused_for > 0
    states = [job_state(j) for j in jobs]
    assert [s[2] for s in states] == [0, 0, 0], "no attempt is burned"
    assert all(s[0] == "pending" for s in states)
    # While paused, a new cycle claims nothing.
    assert cycle().claimed == 0


def test_consumer_resumes_by_itself_after_an_outage(llm_server, settings, free_port):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"http://127.0.0.1:{free_port}/v1"}
    jobs = enqueue(2)
    first = cycle()
    assert first.outcomes == {"released": 2}
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": llm_server.url}
    from tests.conftest import wait_for

    wait_for(lambda: BREAKER.allows(), timeout=5, what="the breaker to close")
    StudyQuestionJob.objects.update(run_after=timezone.now())
    assert cycle().outcomes == {"completed": 2}
    assert [job_state(j) for j in jobs] == [("completed", "", 1)] * 2


def test_missing_and_empty_questions_fail_permanently(llm_server):
    (missing,) = enqueue()
    (empty,) = enqueue(text="   ")
    StudyQuestion.objects.filter(pk=missing.study_question_id).delete()
    cycle(batch_size=2)
    assert job_state(missing) == ("failed", "question_missing", 1)
    assert job_state(empty) == ("failed", "question_empty", 1)
    assert llm_server.stats()["requests"] == 0


def test_reserved_and_unknown_kinds_are_skipped(llm_server, monkeypatch):
    question = StudyQuestionFactory()
    summary = queue.enqueue(question, JobKind.SESSION_SUMMARY).job
    cycle()
    assert job_state(summary) == ("skipped", "unsupported_kind", 1)
    # A kind this version has no handler for (e.g. written by a newer release).
    monkeypatch.delitem(consumer.RESERVED, JobKind.SESSION_SUMMARY)
    other = queue.enqueue(StudyQuestionFactory(), JobKind.SESSION_SUMMARY).job
    cycle()
    assert job_state(other) == ("skipped", "unknown_kind", 1)


def test_a_crashing_handler_fails_only_its_own_job(llm_server, monkeypatch):
    real = consumer.HANDLERS[JobKind.EXPLANATION]

    async def flaky(job, ctx):
        if job.study_question_id == boom.pk:
            raise RuntimeError("handler bug")
        return await real(job, ctx)

    boom = StudyQuestionFactory(text="boom")
    bad = queue.enqueue(boom).job
    (good,) = enqueue()
    monkeypatch.setitem(consumer.HANDLERS, JobKind.EXPLANATION, flaky)
    result = cycle()
    assert result.outcomes == {"pending": 1, "completed": 1}
    status, code, _ = job_state(bad)
    assert (status, code) == ("pending", "internal")
    assert "RuntimeError: handler bug" in bad.error_message
    assert job_state(good)[0] == "completed"


def test_running_jobs_send_heartbeats(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "HEARTBEAT_SECONDS": 0.05}
    llm_server.configure(delay=0.4)
    (job,) = enqueue()
    cycle()
    job.refresh_from_db()
    assert job.status == "completed"
    assert (job.heartbeat_at - job.started_at).total_seconds() >= 0.2


def test_a_job_skipped_by_an_operator_mid_call_is_abandoned(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "HEARTBEAT_SECONDS": 0.05}
    llm_server.configure(fault="slow", slow_seconds=3)
    (job,) = enqueue()
    import threading

    from tests.conftest import wait_for

    def skip_when_running() -> None:
        try:
            wait_for(lambda: llm_server.stats()["active"] == 1, what="the LLM call")
            queue.skip([job.pk])
        finally:
            connections.close_all()  # this thread's own DB connection

    thread = threading.Thread(target=skip_when_running)
    thread.start()
    result = cycle()
    thread.join()
    assert result.outcomes == {"lost": 1}
    assert job_state(job) == ("skipped", "operator_skipped", 1)
    assert StudyQuestion.objects.get().explanation == ""


def test_stop_request_stops_claiming(llm_server):
    enqueue(3)
    result = cycle(should_stop=lambda: True)
    assert result.claimed == 0 and result.more_ready


def test_on_stop_jobs_waiting_for_the_gate_are_released_not_started(llm_server):
    llm_server.configure(delay=0.3)
    jobs = enqueue(2)

    def should_stop() -> bool:
        # Stop once the first call has reached the server: the second job, claimed
        # ahead, is then waiting at the gate.
        return llm_server.stats()["requests"] >= 1

    result = cycle(should_stop=should_stop)
    assert result.outcomes == {"completed": 1, "released": 1}
    assert llm_server.stats()["requests"] == 1
    assert [job_state(j)[0::2] for j in jobs] == [("completed", 1), ("pending", 0)]


def test_jobs_claimed_as_the_stop_comes_are_released_not_started(llm_server):
    jobs = enqueue(3)
    calls = []

    def should_stop() -> bool:
        # False only when the loop first looks: its first claims are then in flight
        # when it sees the stop.
        calls.append(1)
        return len(calls) > 1

    result = cycle(should_stop=should_stop)
    assert result.claimed >= 1
    assert result.outcomes == {"released": result.claimed}
    assert llm_server.stats()["requests"] == 0
    assert [job_state(j) for j in jobs] == [("pending", "", 0)] * 3


def test_a_job_cut_off_by_a_dying_server_twice_in_a_row_loses_an_attempt(llm_server):
    from tests.conftest import wait_for
    from tests.llm_server import LLMServer

    (job,) = enqueue(1)
    port, server, revived = llm_server.port, llm_server, []
    states = []
    try:
        for _ in range(2):
            server.configure(delay=5)  # the reply starts at once; the tokens never come
            stopper = server.stop_once_active()
            assert cycle().outcomes in ({"released": 1}, {"pending": 1})
            stopper.join()
            job.refresh_from_db()
            states.append((job.status, job.error_code, job.attempts, job.error_message))
            server = LLMServer(port=port).start()  # the server comes back
            revived.append(server)
            wait_for(BREAKER.allows, timeout=5, what="the breaker to close")
            StudyQuestionJob.objects.update(run_after=timezone.now())
    finally:
        for srv in revived:
            srv.stop()
    first, second = states
    # Once: an outage like any other, the attempt is given back.
    assert first[:3] == ("pending", "llm_unavailable", 0)
    assert first[3].startswith("reply cut off and the server is gone")
    # Twice in a row: this question may be what brings the server down; it counts.
    assert second[:3] == ("pending", "llm_server_error", 1)
    assert second[3].startswith("cut off twice in a row")
