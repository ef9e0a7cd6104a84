"""A failed LLM call becomes the transition the failure policy names (``workers/registry.py``),
and a kind nobody handles is skipped."""

from __future__ import annotations

import asyncio

import pytest

from studyqueue.models import ErrorCode, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.operations import skip
from studyqueue.queue.retry import MAX_FREE_RELEASES
from studyqueue.queue.transitions import Outcome
from studyqueue.services.llm import LLMError
from studyqueue.workers.registry import llm_failed
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def failed_and_written(consumer, job, error):  # type: ignore[no-untyped-def]
    """The policy's decision for a failed call, written as the consumer writes it."""
    return asyncio.run(consumer.store.finish(job, llm_failed(consumer.pool.members[0], job, error)))


LAST = MAX_FREE_RELEASES  # free releases used up: the next failure counts


@pytest.mark.parametrize(
    "code,affects_all,reached_server,free_releases,outcome,status,attempts,breaker_open",
    [
        # The server as a whole: the breaker opens; the job is handed back, attempt kept...
        (ErrorCode.LLM_UNAVAILABLE, False, False, 0, Outcome.RELEASED, "pending", 0, True),
        # ...as often as it takes when the call never reached the server...
        (ErrorCode.LLM_UNAVAILABLE, False, False, LAST, Outcome.RELEASED, "pending", 0, True),
        # ...else MAX_FREE_RELEASES times in a row, then the failure counts.
        (ErrorCode.LLM_OVERLOADED, False, True, 0, Outcome.RELEASED, "pending", 0, True),
        (ErrorCode.LLM_OVERLOADED, False, True, LAST, Outcome.RETRYING, "pending", 1, True),
        (ErrorCode.LLM_REJECTED, True, True, LAST - 1, Outcome.RELEASED, "pending", 0, True),
        (ErrorCode.LLM_REJECTED, True, True, LAST, Outcome.FAILED, "failed", 1, True),
        # One job's failure: counted, the breaker stays closed.
        (ErrorCode.LLM_SERVER_ERROR, False, True, 0, Outcome.RETRYING, "pending", 1, False),
        (ErrorCode.LLM_REJECTED, False, True, 0, Outcome.FAILED, "failed", 1, False),
    ],
)
def test_a_failed_call_becomes_the_transition_the_policy_names(
    llm_server,
    settings,
    make_consumer,
    code,
    affects_all,
    reached_server,
    free_releases,
    outcome,
    status,
    attempts,
    breaker_open,
):
    # Open for a minute, not the fixture's 0.2 s: a loaded machine can take longer than that
    # between the trip and the look at the breaker below.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 60}
    consumer = make_consumer()
    job = enqueue(StudyQuestionFactory()).job
    StudyQuestionJob.objects.filter(pk=job.pk).update(free_releases=free_releases)
    (claimed,) = transitions.claim(worker_id="test", limit=1)
    error = LLMError(code, "boom", affects_all=affects_all, reached_server=reached_server)

    assert failed_and_written(consumer, claimed, error) == outcome
    claimed.refresh_from_db()
    assert (claimed.status, claimed.error_code, claimed.attempts) == (status, code, attempts)
    assert consumer.pool.members[0].breaker.allows() is not breaker_open
    expected_free = free_releases + 1 if outcome == Outcome.RELEASED and reached_server else 0
    if outcome == Outcome.RELEASED and not reached_server:
        expected_free = free_releases
    assert claimed.free_releases == expected_free


def test_a_job_that_is_no_longer_ours_is_lost_and_nothing_is_written(llm_server, make_consumer):
    consumer = make_consumer()
    job = enqueue(StudyQuestionFactory()).job
    (claimed,) = transitions.claim(worker_id="test", limit=1)
    skip([job.pk])  # an operator takes it
    error = LLMError(ErrorCode.LLM_UNAVAILABLE, "down", reached_server=False)
    assert failed_and_written(consumer, claimed, error) == Outcome.LOST
    claimed.refresh_from_db()
    assert (claimed.status, claimed.error_code) == ("skipped", "operator_skipped")
