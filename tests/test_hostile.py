"""The real consumer against a hostile LLM server (``tests/hostile_llm.py``): every job
ends in bounded calls, memory stays bounded whatever is sent, no secret escapes."""

from __future__ import annotations

import logging
import signal
import subprocess
import tracemalloc

import pytest
from django.utils import timezone

from studyqueue.models import StudyQuestion, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.retry import MAX_FREE_RELEASES
from studyqueue.services.gate import CircuitBreaker
from studyqueue.services.llm import LLMError
from tests.factories import StudyQuestionFactory
from tests.helpers import ROOT
from tests.hostile_llm import HostileServer

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024
SECRET_KEY = "sk-hostile-0123456789abcdef"
PEAK_LIMIT = 48 * MB  # the default reply cap is 8 MB; 256 MB are sent


@pytest.fixture
def hostile(settings):
    """``hostile(mode, **settings)``: a hostile server wired into the STUDYQUEUE settings."""
    servers: list[HostileServer] = []

    def start(mode: str, **overrides: object) -> HostileServer:
        server = HostileServer(mode).start()
        servers.append(server)
        settings.STUDYQUEUE = {
            "LLM_URL": server.url,
            "LLM_TIMEOUT_SECONDS": 10,
            "BREAKER_BASE_SECONDS": 0.05,
            "BREAKER_MAX_SECONDS": 0.1,
            **overrides,
        }
        return server

    yield start
    for server in servers:
        server.stop()


# For a test that expects one cycle to meet one server-wide failure and end.
LONG_PAUSE = {"BREAKER_BASE_SECONDS": 30, "BREAKER_MAX_SECONDS": 60}


def one_job() -> StudyQuestionJob:
    return enqueue(StudyQuestionFactory(text="What is 2 + 2?")).job


def state(job: StudyQuestionJob) -> tuple[str, str, int]:
    job.refresh_from_db()
    return job.status, job.error_code, job.attempts


def run_measured(consumer) -> int:  # type: ignore[no-untyped-def]
    """One cycle; the peak of memory allocated by Python meanwhile (bytes)."""
    tracemalloc.start()
    try:
        consumer.run_cycle()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_until_it_ends(consumer, job: StudyQuestionJob, limit: int) -> int:  # type: ignore[no-untyped-def]
    """Cycles until the job is final; how many. Fails past ``limit`` cycles."""
    cycles = 0
    while state(job)[0] == "pending":
        cycles += 1
        assert cycles <= limit, f"the job has not ended after {limit} cycles"
        StudyQuestionJob.objects.update(run_after=timezone.now())  # skip backoffs
        consumer.pool.members[0].breaker.success()  # and the pause: the next call is made at once
        consumer.run_cycle()
    return cycles


# --------------------------------------------------------------------------- every job ends


@pytest.mark.parametrize("mode", ["hangup", "reset"])
def test_a_server_that_drops_every_call_ends_the_job_in_bounded_calls(hostile, make_consumer, mode):
    server = hostile(mode)
    job = one_job()
    run_until_it_ends(make_consumer(), job, limit=20)
    assert state(job) == ("failed", "llm_unavailable", 3)
    # Each call goes out once: the server read it before it closed, so it may have done the
    # work (only a request the close stopped before it was written goes again).
    assert server.requests == (MAX_FREE_RELEASES + 1) * 3
    print(f"mode={mode} calls_until_failed={server.requests}")


def test_a_stalled_server_ends_the_call_at_the_stall_timeout_and_frees_the_gate(
    hostile, make_consumer
):
    server = hostile("stall", LLM_STALL_SECONDS=0.3, LLM_TIMEOUT_SECONDS=30)
    jobs = [one_job(), one_job()]
    started = timezone.now()
    result = make_consumer().run_cycle()
    elapsed = (timezone.now() - started).total_seconds()
    print(f"two stalled calls ended after {elapsed:.2f}s (whole-call timeout 30 s)")
    assert result.outcomes == {"retrying": 2}
    assert server.requests == 2, "the gate was freed for the second job"
    for job in jobs:
        assert state(job) == ("pending", "llm_timeout", 1)
        assert job.error_message == "no byte from the server for 0.3s"


def test_the_breaker_pause_stays_bounded_after_10000_trips(settings):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    logging.getLogger("studyqueue.breaker").disabled = True
    try:
        pauses = [
            breaker.trip(LLMError("llm_overloaded", "busy", reached_server=True))  # type: ignore[arg-type]
            for _ in range(10_000)
        ]
        # A refused connection (nothing listens) is looked at again within seconds.
        down = CircuitBreaker()
        refusals = [
            down.trip(LLMError("llm_unavailable", "down", reached_server=False))  # type: ignore[arg-type]
            for _ in range(10_000)
        ]
    finally:
        logging.getLogger("studyqueue.breaker").disabled = False
    assert pauses[:6] == [2, 4, 8, 16, 32, 60]
    assert set(pauses[6:]) == {60}
    assert 0 < breaker.remaining() <= 60
    assert refusals[:3] == [2, 4, 5] and set(refusals[3:]) == {5}


# --------------------------------------------------------------------------- memory stays bounded


@pytest.mark.parametrize("mode", ["huge_stream", "endless_line", "huge_json"])
def test_a_reply_over_the_cap_ends_the_call_with_memory_flat(hostile, make_consumer, mode):
    # The cap ends the call, not the clock: reading 8 MB of chunks can take a loaded CI
    # machine longer than the fixture's 10 s whole-call timeout.
    server = hostile(mode, LLM_TIMEOUT_SECONDS=120)
    job = one_job()
    peak = run_measured(make_consumer())
    print(f"mode={mode} sent_mb={server.bytes_sent / MB:.1f} peak_mb={peak / MB:.1f}")
    assert state(job) == ("pending", "llm_bad_response", 1)
    assert "LLM_MAX_REPLY_BYTES" in job.error_message
    assert peak < PEAK_LIMIT
    assert StudyQuestion.objects.get().explanation == ""


def test_a_gzip_bomb_is_never_inflated(hostile, make_consumer):
    server = hostile("gzip_bomb")
    job = one_job()
    peak = run_measured(make_consumer())
    print(f"gzip bomb: sent_kb={server.bytes_sent / 1024:.0f} peak_mb={peak / MB:.1f}")
    assert state(job) == ("pending", "llm_bad_response", 1)
    assert "compressed reply (gzip)" in job.error_message
    assert peak < PEAK_LIMIT


def test_a_huge_error_body_is_read_only_in_part(hostile, make_consumer):
    hostile("huge_error")
    job = one_job()
    peak = run_measured(make_consumer())
    assert state(job) == ("pending", "llm_server_error", 1)
    assert job.error_message.startswith("HTTP 500: error error")
    assert peak < PEAK_LIMIT


# --------------------------------------------------------------------------- bad data


@pytest.mark.parametrize("mode", ["deep_json", "bad_charset"])
def test_malformed_bodies_are_bad_responses_never_internal(hostile, make_consumer, mode):
    hostile(mode)
    job = one_job()
    make_consumer().run_cycle()
    assert state(job) == ("pending", "llm_bad_response", 1)


def test_values_wider_than_the_columns_are_clipped_cleaned_and_clamped(hostile, make_consumer):
    hostile("wide_values")
    job = one_job()
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    assert state(job) == ("completed", "", 1)
    question = StudyQuestion.objects.get()
    assert question.explanation == "AB explained."
    reply = job.revision
    assert question.current_revision == reply and reply.model == "m" * 200
    assert (reply.prompt_tokens, reply.completion_tokens) == (2**31 - 1, 2**31 - 1)


def test_a_stored_invalid_choices_value_ends_the_job_at_once(hostile, make_consumer):
    server = hostile("hangup")
    job = one_job()
    StudyQuestion.objects.update(choices=42)  # as raw SQL or an old import could leave it
    make_consumer().run_cycle()
    assert state(job) == ("failed", "question_invalid", 1)
    assert "must be a list of strings" in job.error_message
    assert server.requests == 0


# --------------------------------------------------------------------------- no secret escapes


def _assert_nowhere(secret: str, caplog, admin_client, job: StudyQuestionJob) -> None:  # type: ignore[no-untyped-def]
    assert secret not in caplog.text, "in a log line"
    for row in StudyQuestionJob.objects.values_list(
        "error_message", "revision__model", "worker_id"
    ):
        assert not any(secret in str(value) for value in row), "in the database"
    page = admin_client.get(f"/admin/studyqueue/studyquestionjob/{job.pk}/change/")
    assert page.status_code == 200
    assert secret not in page.content.decode(), "on the admin job page"


def test_a_key_echoed_by_the_server_is_redacted_everywhere(
    hostile, make_consumer, caplog, admin_client
):
    caplog.set_level(logging.DEBUG)
    # A pause longer than any cycle: a slow machine's cycle outlasted 0.1 s and claimed the
    # job again when it ended (three free releases: failed).
    server = hostile("echo_key", LLM_API_KEY=SECRET_KEY, **LONG_PAUSE)
    job = one_job()
    make_consumer().run_cycle()
    assert server.last_authorization == f"Bearer {SECRET_KEY}"
    status, code, attempts = state(job)
    assert (status, code, attempts) == ("pending", "llm_rejected", 0)
    assert job.error_message == "HTTP 401: Incorrect API key provided: [redacted]"
    assert "Incorrect API key provided: [redacted]" in caplog.text
    _assert_nowhere(SECRET_KEY, caplog, admin_client, job)


def test_a_key_with_a_trailing_line_end_never_leaks(hostile, make_consumer, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    server = hostile("echo_key", LLM_API_KEY=SECRET_KEY + "\r", **LONG_PAUSE)
    job = one_job()
    make_consumer().run_cycle()
    assert server.requests == 0, "a header with a line end is never sent"
    assert state(job)[:2] == ("pending", "llm_rejected")
    assert "LLM_API_KEY holds characters an HTTP header cannot carry" in job.error_message
    _assert_nowhere(SECRET_KEY, caplog, admin_client, job)


def test_url_credentials_never_leak(settings, free_port, make_consumer, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    settings.STUDYQUEUE = {"LLM_URL": f"http://llmuser:pa55word-xyz@127.0.0.1:{free_port}/v1"}
    job = one_job()
    make_consumer().run_cycle()
    assert state(job)[:2] == ("pending", "llm_unavailable")
    assert "http://[redacted]@127.0.0.1" in job.error_message
    _assert_nowhere("pa55word-xyz", caplog, admin_client, job)
    _assert_nowhere("llmuser", caplog, admin_client, job)


def test_runconsumer_prints_the_url_without_credentials(child_env, python, free_port):
    """The start-up line and log of a real runconsumer process."""
    env = {
        **child_env,
        "LOG_LEVEL": "INFO",
        "STUDYQUEUE_LLM_URL": f"http://llmuser:pa55word-xyz@127.0.0.1:{free_port}/v1",
    }
    proc = subprocess.Popen(
        [python, "manage.py", "runconsumer", "--interval", "60"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first_line = proc.stdout.readline()  # written once the consumer is ready
        proc.send_signal(signal.SIGTERM)
        _, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors
    assert "against http://[redacted]@127.0.0.1" in first_line
    assert "study_consumer_started" in errors
    assert "pa55word-xyz" not in first_line + errors
