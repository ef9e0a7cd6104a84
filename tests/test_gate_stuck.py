"""A gate slot nobody gives back: waits at the gate are bounded like any hand-back, and on
PostgreSQL a slot held past the stall bound by a consumer that no longer reports is
reclaimed (its jobs fenced first), proven with real consumer processes and SIGSTOP."""

from __future__ import annotations

import asyncio
import time

import pytest

from studyqueue import queue, retry
from studyqueue.models import JobAttempt, StudyQuestionJob
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_gate_timeout_counts_like_a_release_after_a_call():
    policy = retry.strategy()
    bound = policy.max_free_releases
    assert all(policy.gate_timeout_is_free(free_releases=n) for n in range(bound))
    assert not policy.gate_timeout_is_free(free_releases=bound)


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
    job = queue.enqueue(StudyQuestionFactory()).job
    consumer = make_consumer()
    asyncio.run(consumer.gate.acquire())  # the only slot, never given back
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
