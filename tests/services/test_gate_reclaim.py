"""A gate slot nobody gives back: waits at the gate are bounded like any hand-back, and on
PostgreSQL a slot held past the stall bound by a consumer that no longer reports is
reclaimed (its jobs fenced first), proven with real consumer processes and SIGSTOP."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from studyqueue.models import ErrorCode, ExplanationRevision, JobAttempt, StudyQuestionJob
from studyqueue.queue import retry
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory
from tests.helpers import Counters, wait_for
from tests.helpers.processes import bulk_jobs, log_text

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_gate_timeout_counts_like_a_release_after_a_call():
    timeout = retry.Failure(ErrorCode.LLM_OVERLOADED, job_at_fault=False)
    bound = retry.strategy().max_free_releases
    for n in range(bound):
        assert retry.decide(timeout, Counters(free_releases=n)).action is retry.Action.RELEASE
    assert retry.decide(timeout, Counters(free_releases=bound)).action is retry.Action.RETRY


def test_gate_timeouts_end_the_job_after_their_bound(llm_server, make_consumer, settings):
    """A slot held and never given back: each wait at the gate hands the job back free twice
    (MAX_FREE_RELEASES), then counts an attempt; after three attempts the job ends failed,
    with nine attempt rows, instead of waiting and being handed back forever."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 1,
        "GATE_TIMEOUT_SECONDS": 0.05,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
        "MAX_ATTEMPTS": 3,
        "CYCLE_BUDGET_SECONDS": 2,
    }
    job = enqueue(StudyQuestionFactory()).job
    consumer = make_consumer()
    asyncio.run(consumer.pool.members[0].gate.acquire())  # the only slot, never given back
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        consumer.run_cycle()
        job.refresh_from_db()
        if job.status != "pending":
            break
    assert (job.status, job.error_code, job.attempts) == ("failed", "llm_overloaded", 3)
    waits = (retry.strategy().max_free_releases + 1) * 3
    assert JobAttempt.objects.filter(job=job).count() == waits
    assert llm_server.stats()["requests"] == 0
    assert StudyQuestionJob.objects.filter(status="processing").count() == 0


# Short clocks (as tests/test_chaos.py): the stall bound is 3 s.
FAST = {
    "GATE_PERMITS": 1,
    "GATE_TIMEOUT_SECONDS": 1,
    "INTERVAL_SECONDS": 0.5,
    "HEARTBEAT_SECONDS": 0.3,
    "STALE_MINUTES": 0.05,
    "LLM_TIMEOUT_SECONDS": 2,
    "BACKOFF_BASE_SECONDS": 0.2,
    "BACKOFF_JITTER": 0,
    "BREAKER_BASE_SECONDS": 0.2,
    "SHUTDOWN_GRACE_SECONDS": 5,
}


@pytest.mark.postgres
@pytest.mark.slow
def test_a_frozen_consumers_slot_is_reclaimed_and_it_writes_nothing_when_it_wakes(
    consumers, llm_server
):
    """A real consumer frozen (SIGSTOP) in the middle of its call, holding the only slot:
    past the stall bound another consumer fences its job and terminates its gate session,
    then runs every job, the frozen one's too. Resumed (SIGCONT), it gets its reply and
    stores nothing: its claim was taken."""
    llm_server.configure(held=True)  # the first call hangs until the test lets it go
    [first] = bulk_jobs(1)
    frozen = consumers("--worker-id", "frozen", **FAST)
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the frozen one's call")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        llm_server.configure(held=False)
        others = bulk_jobs(3, text="other {i}")
        live = consumers("--worker-id", "live", **FAST)
        wait_for(
            lambda: StudyQuestionJob.objects.filter(status="completed").count() == 4,
            timeout=60,
            interval=0.2,
            what="every job completed by the live consumer",
        )
        assert "study_gate_slot_reclaimed" in log_text(live)
        assert "holder=frozen" in log_text(live)
        job = StudyQuestionJob.objects.get(study_question_id=first)
        assert job.worker_id == "live"
        outcomes = list(job.attempt_log.order_by("number").values_list("outcome", flat=True))
        assert (outcomes[0], outcomes[-1]) == ("stale", "completed")
        # Gate timeouts while it waited were bounded: a few attempts, not one per second.
        for other in StudyQuestionJob.objects.filter(study_question_id__in=others):
            assert other.attempt_log.count() <= 3 * (retry.MAX_FREE_RELEASES + 1)
    finally:
        llm_server.let_through(1)  # its reply goes out: it finds it on waking
        os.kill(frozen.pid, signal.SIGCONT)
    wait_for(lambda: "_refused" in log_text(frozen), what="the woken consumer's refused write")
    assert ExplanationRevision.objects.filter(question_id=first).count() == 1
    job = StudyQuestionJob.objects.get(study_question_id=first)
    assert (job.status, job.worker_id) == ("completed", "live")
    for proc in (frozen, live):
        proc.send_signal(signal.SIGTERM)
    for proc in (frozen, live):
        proc.wait(timeout=30)


@pytest.mark.postgres
def test_a_slot_is_reclaimed_only_from_a_consumer_proven_silent(settings):
    """Another session holds slot 0 (a second connection, as another consumer's gate): it
    is terminated only once it names a consumer that stopped reporting and whose jobs have
    no heartbeat, both past the stall bound; its job is reset first."""
    from datetime import timedelta

    import psycopg
    from django.db import connection
    from django.utils import timezone

    from studyqueue.models import QueueConsumer
    from studyqueue.queue.pg import psycopg_kwargs
    from studyqueue.services.gate import LOCK_NAMESPACE, holder_tag, lock_key
    from studyqueue.services.gate_reclaim import reclaim_stuck_slots
    from tests.factories import StudyQuestionJobFactory

    settings.STUDYQUEUE = {**getattr(settings, "STUDYQUEUE", {}), "STALE_MINUTES": 0.05}
    endpoint, now = "http://127.0.0.1:9/v1", timezone.now()
    slots = {0: lock_key(endpoint, 0)}
    holder = psycopg.connect(**psycopg_kwargs(connection.settings_dict), autocommit=True)
    holder.execute(
        "SELECT pg_advisory_lock(%s, %s), set_config('application_name', %s, false)",
        [LOCK_NAMESPACE, slots[0], holder_tag("stuck:1")],
    )
    try:
        assert reclaim_stuck_slots("default", endpoint, slots) == 0  # names no known consumer
        record = QueueConsumer.objects.create(
            worker_id="stuck:1", host="h", pid=1, started_at=now, seen_at=now,
            interval_seconds=0.5, llm_url=endpoint,
        )  # fmt: skip
        assert reclaim_stuck_slots("default", endpoint, slots) == 0  # it reports
        job = StudyQuestionJobFactory(
            status="processing", worker_id="stuck:1", started_at=now, heartbeat_at=now
        )
        QueueConsumer.objects.filter(pk=record.pk).update(seen_at=now - timedelta(seconds=10))
        assert reclaim_stuck_slots("default", endpoint, slots) == 0  # its job still beats
        job.refresh_from_db()
        assert job.status == "processing"
        StudyQuestionJob.objects.filter(pk=job.pk).update(heartbeat_at=now - timedelta(seconds=10))
        assert reclaim_stuck_slots("default", endpoint, slots) == 1
        job.refresh_from_db()
        assert (job.status, job.claim_token, job.error_code) == ("pending", None, "stale")
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")  # its session is gone, and its lock with it
    finally:
        holder.close()
