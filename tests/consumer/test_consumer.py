"""The consume cycle against a real test LLM server: every fault ends in its documented state."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from studyqueue.consumer.consumer import Consumer, CycleResult
from studyqueue.models import KIND_SPECS, ErrorCode, JobKind, StudyQuestion, StudyQuestionJob
from studyqueue.queue import operations, transitions
from studyqueue.queue.enqueue import enqueue as enqueue_job
from studyqueue.queue.pauses import pause
from studyqueue.queue.retry import MAX_FREE_RELEASES
from studyqueue.sets import eta
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.llm_server import ANSWER, LLMServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def consumer(llm_server, make_consumer) -> Consumer:
    """A consumer of the test LLM server, with the settings in force when it is made."""
    return make_consumer()


def enqueue(n: int = 1, **question_fields) -> list[StudyQuestionJob]:
    return [enqueue_job(StudyQuestionFactory(**question_fields)).job for _ in range(n)]


def job_state(job: StudyQuestionJob) -> tuple:
    job.refresh_from_db()
    return job.status, job.error_code, job.attempts


def make_due() -> None:
    """Test set-up: every pending job is due now (skip its backoff)."""
    StudyQuestionJob.objects.update(run_after=timezone.now())


def test_a_cycle_writes_the_explanation_and_completes_the_job(consumer, llm_server):
    llm_server.configure(verify_answer="Answer: 2")  # the blind check names the key
    (job,) = enqueue(text="What is 2 + 2?", choices=["3", "4"], answer="4")
    result = consumer.run_cycle()
    # The explanation, then (once no explanation is ready) its checks: the blind verification
    # and the step check.
    assert result.claimed == 3 and result.outcomes == {"completed": 3}
    assert job_state(job) == ("completed", "", 1)
    reply = job.revision
    assert (reply.model, reply.prompt_tokens, reply.completion_tokens) == ("default_model", 42, 7)
    assert job.llm_ms is not None
    question = StudyQuestion.objects.get()
    assert question.explanation == ANSWER
    assert question.explanation_flags == [], "the test server's reply is a good one"
    assert question.current_revision == reply and not reply.truncated
    assert llm_server.stats()["per_question"] == {"What is 2 + 2?": 3}  # written, checked twice


def test_a_server_without_usage_gets_counted_tokens_and_an_estimate(consumer, llm_server):
    """Like llama-cpp-python's server: no usage in the stream. Each explanation records the
    chunks it streamed as its completion tokens (marked counted) and a decode rate, so the
    estimate of what waits is in tokens/s, not "no token counts reported"."""
    llm_server.configure(stream_usage=False, word_delay=0.01, verify_answer="Answer: 2")
    jobs = enqueue(2, choices=["3", "4"], answer="4")
    while consumer.run_cycle().claimed:
        pass
    words = len(ANSWER.split(" "))
    for job in jobs:
        assert job_state(job) == ("completed", "", 1)
        revision = job.revision
        assert (revision.completion_tokens, revision.tokens_counted) == (words, True)
        assert revision.prompt_tokens is None and revision.tokens_per_second
    rate = eta.Rate.of(timezone.now())
    assert rate is not None and rate.tokens_per_job == words and rate.tokens_per_second
    assert "tok/s" in rate.basis


def test_one_consumer_runs_many_cycles_on_one_client_and_loop(consumer, llm_server):
    for n in range(3):
        enqueue()
        assert consumer.run_cycle().outcomes == {"completed": 1}, f"cycle {n}"
    assert llm_server.stats()["requests"] == 3


def test_the_prompt_carries_question_choices_and_answer():
    from studyqueue.explanations.prompts import build_messages

    question = StudyQuestionFactory(
        text="Capital of France?", choices=["Paris", "Rome"], answer="Paris"
    )
    system, user = build_messages(question)
    assert system["role"] == "system" and user["role"] == "user"
    assert "Capital of France?" in user["content"]
    assert "1. Paris\n2. Rome" in user["content"]
    assert "Correct answer: Paris" in user["content"]
    # The instructions are in the system message, which the server can cache.
    assert "same language as the question" in system["content"]
    assert user["content"].endswith("Correct answer: Paris")


def test_a_backlog_drains_in_one_cycle(consumer, llm_server):
    jobs = enqueue(5)
    result = consumer.run_cycle()
    assert result.outcomes == {"completed": 5}
    assert result.next_due_in is None
    assert all(job_state(j)[0] == "completed" for j in jobs)
    assert llm_server.stats()["max_active"] == 1


def test_gate_permits_run_jobs_side_by_side(llm_server, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 3, "BATCH_SIZE": 3}
    llm_server.configure(delay=0.2)
    enqueue(6)
    assert make_consumer().run_cycle().outcomes == {"completed": 6}
    assert llm_server.stats()["max_active"] == 3


def test_a_cold_prompt_goes_first_alone_then_the_others_join(llm_server, settings, make_consumer):
    """Warm-first: one call on a prompt version new to this consumer; the others after its
    first token (the server's prompt cache then holds the shared prefix)."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 4, "BATCH_SIZE": 4}
    llm_server.configure(delay=0.3, word_delay=0.05)
    consumer = make_consumer()
    enqueue(4)
    assert consumer.run_cycle().outcomes == {"completed": 4}
    starts, firsts = sorted(llm_server.starts), sorted(llm_server.first_tokens)
    assert starts[1] >= firsts[0]
    assert llm_server.stats()["max_active"] >= 2
    # Warm now: the next batch goes all at once.
    llm_server.reset_stats()
    enqueue(4)
    assert consumer.run_cycle().outcomes == {"completed": 4}
    assert llm_server.stats()["max_active"] == 4


def test_budget_stops_claiming_and_reports_more_ready(llm_server, make_consumer):
    llm_server.configure(delay=0.1)
    enqueue(5)
    result = make_consumer(budget=0).run_cycle()
    assert result.claimed == 1
    assert result.more_ready


@pytest.mark.parametrize(
    "fault,status,code",
    [
        ("500", "pending", ErrorCode.LLM_SERVER_ERROR),
        ("malformed", "pending", ErrorCode.LLM_BAD_RESPONSE),
        ("null", "pending", ErrorCode.LLM_EMPTY),
        ("drop", "pending", ErrorCode.LLM_SERVER_ERROR),
        ("400", "failed", ErrorCode.LLM_REJECTED),
    ],
)
def test_job_level_faults(consumer, llm_server, fault, status, code):
    llm_server.configure(fault=fault)
    (job,) = enqueue()
    consumer.run_cycle()
    assert job_state(job) == (status, code, 1)
    if status == "pending":
        assert job.run_after > timezone.now(), "a retry waits for its backoff"
    assert consumer.pool.members[0].breaker.allows(), "a job-level fault must not pause the queue"


def test_timeout_is_retried_later(llm_server, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_TIMEOUT_SECONDS": 0.3}
    llm_server.configure(fault="slow", slow_seconds=2)
    (job,) = enqueue()
    make_consumer().run_cycle()
    assert job_state(job) == ("pending", "llm_timeout", 1)


@pytest.mark.parametrize(
    "header,job_delay,breaker_pause",
    [
        ("2", 0.5, 2.0),
        ("0.3", 0.3, 1.0),  # the breaker pauses at least BREAKER_BASE_SECONDS
        ("0", 0.0, 1.0),
        ("99999999", 0.5, 3.0),  # capped by BACKOFF_MAX_SECONDS and BREAKER_MAX_SECONDS
        ("Fri, 01 Jan 2100 00:00:00 GMT", 0.5, 3.0),
        # No usable advice: the job's backoff (0.2 s) and the breaker's own pause (1 s).
        ("-5", 0.2, 1.0),
        ("soon", 0.2, 1.0),
        ("nan", 0.2, 1.0),
        ("", 0.2, 1.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.2, 1.0),
    ],
)
def test_retry_after_is_honoured_up_to_the_caps_and_ignored_when_unusable(
    llm_server, settings, make_consumer, header, job_delay, breaker_pause
):
    """A 429 with this Retry-After, on a job that has used its free releases: the attempt
    counts and the job waits ``job_delay``; the breaker pauses ``breaker_pause``."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "BACKOFF_BASE_SECONDS": 0.2,
        "BACKOFF_MAX_SECONDS": 0.5,
        "BACKOFF_JITTER": 0,
        "BREAKER_BASE_SECONDS": 1.0,
        "BREAKER_MAX_SECONDS": 3.0,
    }
    llm_server.configure(fault="429", retry_after=header)
    (job,) = enqueue()
    StudyQuestionJob.objects.filter(pk=job.pk).update(free_releases=MAX_FREE_RELEASES)
    consumer = make_consumer()
    before = timezone.now()
    result = consumer.run_cycle()
    after = timezone.now()
    assert result.outcomes == {"retrying": 1}
    assert job_state(job) == ("pending", "llm_overloaded", 1)
    assert before + timedelta(seconds=job_delay) <= job.run_after
    assert job.run_after <= after + timedelta(seconds=job_delay)
    assert consumer.pool.members[0].breaker.remaining() <= breaker_pause
    assert (
        consumer.pool.members[0].breaker.remaining()
        >= breaker_pause - (after - before).total_seconds() - 0.5
    )


def test_transient_faults_end_failed_after_max_attempts(consumer, llm_server):
    llm_server.configure(fault="500")
    (job,) = enqueue()
    for _ in range(3):
        make_due()
        consumer.run_cycle()
    assert job_state(job) == ("failed", "llm_server_error", 3)


@pytest.mark.parametrize("fault", ["refused", "429", "503", "404"])
def test_server_wide_faults_release_jobs_without_burning_attempts(
    llm_server, settings, free_port, make_consumer, fault
):
    # A pause longer than the tests' 0.2 s: on a loaded machine the second cycle below
    # came after a 0.2 s pause had run out, and claimed.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 5}
    if fault == "refused":
        settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"http://127.0.0.1:{free_port}/v1"}
    else:
        llm_server.configure(fault=fault, retry_after="1")
    consumer = make_consumer()
    jobs = enqueue(3)
    result = consumer.run_cycle()
    # The job that failed and the one ready behind it are released; no more are claimed,
    # and the server is not asked again.
    assert result.claimed == 2, "the consumer stops claiming after a server-wide failure"
    assert result.outcomes == {"released": 2}
    assert llm_server.stats()["requests"] == (0 if fault == "refused" else 1)
    assert result.paused_for > 0
    states = [job_state(j) for j in jobs]
    assert [s[2] for s in states] == [0, 0, 0], "no attempt is burned"
    assert all(s[0] == "pending" for s in states)
    # While paused, a new cycle claims nothing.
    assert consumer.run_cycle().claimed == 0


def test_consumer_resumes_by_itself_after_each_of_several_outages(
    llm_server, settings, make_consumer
):
    """One long-lived consumer (one client, one gate, one breaker) through five outages:
    nothing it keeps between cycles may wedge it once the server is back."""
    # A pause longer than the tests' 0.2 s: on a loaded machine the cycle went on past a
    # 0.2 s pause and claimed the released jobs again.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 1}
    port = llm_server.port
    llm_server.stop()  # down: connections are refused
    consumer = make_consumer()
    for outage in range(5):
        jobs = enqueue(2)
        assert consumer.run_cycle().outcomes == {"released": 2}, f"outage {outage}"
        revived = LLMServer(port=port).start()  # the same server comes back
        try:
            wait_for(
                consumer.pool.members[0].breaker.allows, timeout=5, what="the breaker to close"
            )
            make_due()
            assert consumer.run_cycle().outcomes == {"completed": 2}, f"after outage {outage}"
        finally:
            revived.stop()
        assert [job_state(j) for j in jobs] == [("completed", "", 1)] * 2
    assert consumer.pool.members[0].gate.free_slots == consumer.pool.members[0].gate.permits, (
        "no gate slot leaked"
    )


def test_unknown_kinds_are_skipped(consumer, monkeypatch):
    # A kind this version has no handler for (e.g. written by a newer release).
    monkeypatch.delitem(KIND_SPECS, JobKind.KEY_AUDIT)
    other = enqueue_job(StudyQuestionFactory(), JobKind.KEY_AUDIT).job
    assert consumer.run_cycle().outcomes == {"skipped": 1}
    assert job_state(other) == ("skipped", "unknown_kind", 1)


def test_a_crashing_handler_fails_only_its_own_job(consumer, monkeypatch):
    real = KIND_SPECS[JobKind.EXPLANATION]

    async def flaky(job, ctx):
        if job.study_question_id == boom.pk:
            raise RuntimeError("handler bug")
        return await real.handler(job, ctx)

    boom = StudyQuestionFactory(text="boom")
    bad = enqueue_job(boom).job
    (good,) = enqueue()
    monkeypatch.setitem(KIND_SPECS, JobKind.EXPLANATION, replace(real, handler=flaky))
    result = consumer.run_cycle()
    assert result.outcomes == {"retrying": 1, "completed": 1}
    status, code, _ = job_state(bad)
    assert (status, code) == ("pending", "internal")
    assert "RuntimeError: handler bug" in bad.error_message
    assert job_state(good)[0] == "completed"


def test_running_jobs_send_heartbeats(llm_server, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "HEARTBEAT_SECONDS": 0.05}
    llm_server.configure(delay=0.4)
    (job,) = enqueue()
    make_consumer().run_cycle()
    job.refresh_from_db()
    assert job.status == "completed"
    assert job.heartbeat_at > job.started_at, "a heartbeat came after the claim's stamp"


def test_a_job_skipped_by_an_operator_mid_call_is_abandoned(llm_server, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "HEARTBEAT_SECONDS": 0.05}
    llm_server.configure(fault="slow", slow_seconds=3)
    (job,) = enqueue()

    def skip_when_running() -> None:
        try:
            wait_for(lambda: llm_server.stats()["active"] == 1, what="the LLM call")
            operations.skip([job.pk])
        finally:
            connections.close_all()  # this thread's own DB connection

    thread = threading.Thread(target=skip_when_running)
    thread.start()
    result = make_consumer().run_cycle()
    thread.join()
    assert result.outcomes == {"lost": 1}
    assert job_state(job) == ("skipped", "operator_skipped", 1)
    assert StudyQuestion.objects.get().explanation == ""
    wait_for(lambda: llm_server.stats()["active"] == 0, timeout=5, what="the call to be closed")


def test_stop_request_stops_claiming(llm_server, make_consumer):
    enqueue(3)
    result = make_consumer(should_stop=lambda: True).run_cycle()
    assert result.claimed == 0 and result.more_ready


def test_on_stop_jobs_waiting_for_the_gate_are_released_not_started(llm_server, make_consumer):
    llm_server.configure(delay=0.3)
    jobs = enqueue(2)

    def should_stop() -> bool:
        # Stop once the first call has reached the server: the second job, claimed
        # ahead, is then waiting at the gate.
        return llm_server.stats()["requests"] >= 1

    result = make_consumer(should_stop=should_stop).run_cycle()
    assert result.outcomes == {"completed": 1, "released": 1}
    assert llm_server.stats()["requests"] == 1
    assert [job_state(j)[0::2] for j in jobs] == [("completed", 1), ("pending", 0)]


def test_jobs_claimed_as_the_stop_comes_are_released_not_started(llm_server, make_consumer):
    jobs = enqueue(3)
    calls = []

    def should_stop() -> bool:
        # False only when the loop first looks: its first claim then returns after the
        # stop request.
        calls.append(1)
        return len(calls) > 1

    result = make_consumer(should_stop=should_stop).run_cycle()
    assert result.claimed >= 1
    assert result.outcomes == {"released": result.claimed}
    assert llm_server.stats()["requests"] == 0
    assert [job_state(j) for j in jobs] == [("pending", "", 0)] * 3


def test_a_pause_hands_back_at_once_the_jobs_waiting_at_the_gate(
    llm_server, settings, make_consumer
):
    """Gate 1, three jobs claimed: one calls the LLM, two wait at the gate. A pause hands
    the two back (attempt kept) while the first call still runs; they are never sent."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 1, "LLM_TIMEOUT_SECONDS": 30}
    llm_server.configure(fault="slow", slow_seconds=4)
    first, *waiting = enqueue(3)
    consumer = make_consumer(batch_size=3)
    results: list[CycleResult] = []
    cycle = threading.Thread(target=lambda: results.append(consumer.run_cycle()))
    cycle.start()
    try:
        wait_for(lambda: llm_server.stats()["active"] == 1, what="the first call")
        wait_for(
            lambda: StudyQuestionJob.objects.filter(status="processing").count() == 3,
            what="two more jobs claimed, waiting at the gate",
        )
        pause(reason="test")
        wait_for(
            lambda: all(job_state(job) == ("pending", "", 0) for job in waiting),
            timeout=10,
            what="the waiting jobs handed back",
        )
        assert llm_server.stats()["active"] == 1, "handed back while the first call runs"
    finally:
        cycle.join(timeout=30)
    assert results[0].outcomes == {"completed": 1, "released": 2}
    assert job_state(first) == ("completed", "", 1)
    assert llm_server.stats()["per_question"] == {first.study_question.text: 1}
    for job in waiting:
        assert "paused" in job.error_message and job.free_releases == 0


def test_a_pause_known_but_lifted_does_not_hold_a_job_back(llm_server, make_consumer):
    """The last look before a call reads the pauses the consumer knows of; one it knows
    but the database no longer has (a resume sends no notice of its own) is confirmed
    there, the job runs, and the stale entry is gone."""
    (job,) = enqueue()
    consumer = make_consumer()
    consumer.unstarted.pauses.noticed("")
    assert consumer.run_cycle().outcomes == {"completed": 1}
    assert job_state(job) == ("completed", "", 1)
    assert consumer.unstarted.pauses.kinds == frozenset()


def test_a_pause_the_consumer_knows_of_holds_back_a_job_claimed_before_it(
    llm_server, make_consumer
):
    """A job claimed before the pause whose notice came while the claim was in flight
    (not yet waiting, so not handed back by it) is held back by its last look."""
    (job,) = enqueue()
    consumer = make_consumer()
    claimed = transitions.claim(worker_id=consumer.worker_id, limit=1)
    pause(reason="test")
    consumer.unstarted.pauses.noticed("")
    consumer.unstarted.jobs[claimed[0].pk] = claimed[0]
    assert consumer.run_one(claimed[0]) == "released"
    assert llm_server.stats()["requests"] == 0
    assert job_state(job) == ("pending", "", 0)


def test_an_explicit_run_ignores_a_pause(llm_server, make_consumer):
    """``run_one`` (``manage.py explain``) runs the job it was given, paused or not."""
    (job,) = enqueue()
    pause()
    claimed = transitions.claim_job(job.pk, worker_id="operator")
    assert claimed is not None
    assert make_consumer().run_one(claimed) == "completed"


def test_grace_period_expiry_hands_running_jobs_back(llm_server, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "SHUTDOWN_GRACE_SECONDS": 0.2}
    llm_server.configure(fault="slow", slow_seconds=3)
    (job,) = enqueue()
    result = make_consumer(should_stop=lambda: llm_server.stats()["active"] == 1).run_cycle()
    assert result.outcomes == {"released": 1}
    assert job_state(job) == ("pending", "", 0)


def test_a_server_that_hangs_up_on_a_job_cannot_loop_it_forever(
    llm_server, settings, make_consumer
):
    """The server accepts the call and closes it without a reply, every time, while it stays
    up: released (attempt kept) MAX_FREE_RELEASES times in a row, then attempts count."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_MAX_SECONDS": 0.3}
    consumer = make_consumer()
    llm_server.configure(fault="hangup")
    (job,) = enqueue()
    outcomes: list[str] = []
    calls = 0
    while job_state(job)[0] == "pending":
        calls += 1
        assert calls <= (MAX_FREE_RELEASES + 1) * job.max_attempts, "the job never ends"
        wait_for(consumer.pool.members[0].breaker.allows, timeout=5, what="the breaker to close")
        make_due()
        result: CycleResult = consumer.run_cycle()
        outcomes += [str(o) for o in result.outcomes.elements()]
    assert job_state(job) == ("failed", "llm_unavailable", 3)
    # Each call goes out once: the server read it before it hung up.
    assert llm_server.stats()["requests"] == calls == (MAX_FREE_RELEASES + 1) * 3
    assert outcomes[: MAX_FREE_RELEASES + 1] == ["released"] * MAX_FREE_RELEASES + ["retrying"]


def test_a_call_cut_off_by_a_dying_server_is_released(llm_server, make_consumer):
    consumer = make_consumer()
    (job,) = enqueue()
    port = llm_server.port
    llm_server.configure(delay=5)  # the reply starts at once; the tokens never come
    stopper = llm_server.stop_once_active()
    assert consumer.run_cycle().outcomes == {"released": 1}
    stopper.join()
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts, job.free_releases) == (
        "pending",
        "llm_unavailable",
        0,
        1,
    )
    revived = LLMServer(port=port).start()  # it comes back; the job completes
    try:
        wait_for(consumer.pool.members[0].breaker.allows, timeout=5, what="the breaker to close")
        make_due()
        assert consumer.run_cycle().outcomes == {"completed": 1}
    finally:
        revived.stop()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.free_releases) == ("completed", 1, 0)


def test_the_cycle_line_says_the_free_calls_under_an_auto_gate_limit(
    llm_server, settings, make_consumer, caplog
):
    """With GATE_PERMITS=auto the gate has GATE_MAX_PERMITS slots but allows only its
    limit: an idle consumer at limit 1 has one free call, not eight."""
    import logging

    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": "auto", "GATE_MAX_PERMITS": 8}
    consumer = make_consumer()
    with caplog.at_level(logging.INFO, logger="studyqueue.consumer"):
        consumer.run_cycle()
    (line,) = [r.getMessage() for r in caplog.records if "study_consumer_cycle " in r.getMessage()]
    assert consumer.pool.members[0].gate.limit == 1
    assert "gate_free=1/1" in line, line


@pytest.mark.django_db
def test_a_stop_signal_taken_by_another_thread_ends_the_wait_for_stop(make_consumer):
    """The kernel hands a process's signal to any of its threads; Python runs the handler
    only when the main thread next runs Python code. A stop signal taken by the scheduler's
    or the poller's thread while the main thread waits to be stopped must still stop it."""
    import signal
    import time

    from studyqueue.management.commands._signals import stop_on_signals

    consumer = make_consumer()
    stopped_by_signal = threading.Event()
    parked = threading.Event()  # another thread of this process, blocked in C
    other = threading.Thread(target=parked.wait, daemon=True)
    other.start()

    def on_stop() -> None:
        stopped_by_signal.set()
        consumer.request_stop()

    # Sent once the main thread waits; the watchdog ends the wait if the signal cannot.
    sender = threading.Timer(0.3, signal.pthread_kill, [other.ident, signal.SIGUSR1])
    watchdog = threading.Timer(10, consumer.request_stop)
    with stop_on_signals(on_stop):
        sender.start()
        watchdog.start()
        started = time.monotonic()
        consumer.wait_for_stop()
        waited = time.monotonic() - started
    watchdog.cancel()
    parked.set()
    assert stopped_by_signal.is_set() and waited < 5, f"woke after {waited:.1f} s"
