"""The failure policy (``studyqueue.queue.retry``), table by table: the manual's failure table in
numbers."""

from __future__ import annotations

import pytest
from django.test import override_settings

from studyqueue.models import ErrorCode
from studyqueue.queue import retry
from studyqueue.queue.retry import Action, Backoff, Decision, Failure, RetryStrategy
from tests.helpers import Counters

JOB = {"BACKOFF_BASE_SECONDS": 10, "BACKOFF_MAX_SECONDS": 50, "BACKOFF_JITTER": 0}
BREAKER = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}


def policy(**settings: float) -> RetryStrategy:
    with override_settings(STUDYQUEUE={**JOB, **BREAKER, **settings}):
        return retry.strategy()


# --------------------------------------------------------------------------- which codes


CLASSIFIED = [
    (ErrorCode.LLM_UNAVAILABLE, True, True),
    (ErrorCode.LLM_OVERLOADED, True, True),
    (ErrorCode.LLM_TIMEOUT, True, False),
    (ErrorCode.LLM_SERVER_ERROR, True, False),
    (ErrorCode.LLM_BAD_RESPONSE, True, False),
    (ErrorCode.LLM_EMPTY, True, False),
    (ErrorCode.STALE, True, False),
    (ErrorCode.INTERNAL, True, False),
    (ErrorCode.QUESTION_CHANGED, True, False),
    (ErrorCode.WEBHOOK_FAILED, True, False),  # a set's notice: the receiver may come back
    (ErrorCode.LLM_REJECTED, False, False),
    (ErrorCode.QUESTION_MISSING, False, False),
    (ErrorCode.QUESTION_EMPTY, False, False),
    (ErrorCode.QUESTION_INVALID, False, False),
    (ErrorCode.UNSUPPORTED_KIND, False, False),
    (ErrorCode.UNKNOWN_KIND, False, False),
    (ErrorCode.OPERATOR_SKIPPED, False, False),
    (ErrorCode.NOTHING_TO_VERIFY, False, False),
    (ErrorCode.SET_MISSING, False, False),
    (ErrorCode.SET_NOT_DONE, False, False),
    (ErrorCode.SET_NOTICED, False, False),
    (ErrorCode.SESSION_MISSING, False, False),
    # A summary decides itself (``workers.session_summary``): retried while attempts remain.
    (ErrorCode.EXPLANATIONS_NEEDED, False, False),
]


@pytest.mark.parametrize("code,transient,server_wide", CLASSIFIED)
def test_every_error_code_is_classified(code, transient, server_wide):
    assert (code in retry.TRANSIENT_ERRORS) is transient
    assert (code in retry.SERVER_WIDE_ERRORS) is server_wide


def test_the_table_above_names_every_error_code():
    assert sorted(code for code, _, _ in CLASSIFIED) == sorted(ErrorCode)


# --------------------------------------------------------------------------- the decision


LAST = retry.MAX_FREE_RELEASES  # free hand-backs used up: the next failure counts
RETRY, FAIL, RELEASE, COMPLETE = Action.RETRY, Action.FAIL, Action.RELEASE, Action.COMPLETE
TIMEOUT, DOWN, BUSY = ErrorCode.LLM_TIMEOUT, ErrorCode.LLM_UNAVAILABLE, ErrorCode.LLM_OVERLOADED

# Every row of the policy: what happened, the job's counters, the decision.
POLICY = [
    # A counted failure with a transient code retries after the backoff while attempts remain.
    (Failure(TIMEOUT), Counters(1), Decision(RETRY, 10)),
    (Failure(TIMEOUT), Counters(2), Decision(RETRY, 20)),
    (Failure(TIMEOUT), Counters(3), Decision(FAIL)),  # the last attempt
    (Failure(TIMEOUT), Counters(4), Decision(FAIL)),
    (Failure(ErrorCode.LLM_SERVER_ERROR, retry_after=7), Counters(1), Decision(RETRY, 7)),
    (Failure(ErrorCode.LLM_BAD_RESPONSE, retry_after=9999), Counters(2), Decision(RETRY, 50)),
    (Failure(ErrorCode.INTERNAL), Counters(1, 1), Decision(FAIL)),
    # A permanent code fails at once.
    (Failure(ErrorCode.LLM_REJECTED), Counters(1), Decision(FAIL)),
    (Failure(ErrorCode.QUESTION_MISSING, retry_after=7), Counters(1), Decision(FAIL)),
    (Failure(ErrorCode.QUESTION_EMPTY), Counters(1), Decision(FAIL)),
    # The server as a whole: the breaker opens; handed back while free...
    (
        Failure(DOWN, reached_server=False, affects_all=True),
        Counters(1),
        Decision(RELEASE, 0, True),
    ),
    # ...as often as it takes when the call never reached the server...
    (
        Failure(DOWN, reached_server=False, affects_all=True),
        Counters(1, free_releases=LAST),
        Decision(RELEASE, 0, True),
    ),
    # ...else MAX_FREE_RELEASES times in a row, then the failure counts.
    (Failure(BUSY, affects_all=True), Counters(1), Decision(RELEASE, 0, True)),
    (Failure(BUSY, affects_all=True), Counters(1, free_releases=LAST), Decision(RETRY, 10, True)),
    (Failure(BUSY, affects_all=True), Counters(3, free_releases=LAST), Decision(FAIL, 0, True)),
    (
        Failure(ErrorCode.LLM_REJECTED, affects_all=True),
        Counters(1, free_releases=LAST),
        Decision(FAIL, 0, True),
    ),
    # Not the job's fault (a gate timeout, a question edited during the call): handed back
    # while free, then counted; the breaker stays closed.
    (Failure(BUSY, job_at_fault=False), Counters(1), Decision(RELEASE)),
    (Failure(BUSY, job_at_fault=False), Counters(1, free_releases=LAST), Decision(RETRY, 10)),
    (Failure(ErrorCode.QUESTION_CHANGED, job_at_fault=False), Counters(1), Decision(RELEASE)),
    (
        Failure(ErrorCode.QUESTION_CHANGED, job_at_fault=False),
        Counters(3, free_releases=LAST),
        Decision(FAIL),
    ),
    # A stale job (its worker died) retries at once while attempts remain.
    (Failure(ErrorCode.STALE), Counters(2), Decision(RETRY)),
    (Failure(ErrorCode.STALE), Counters(3), Decision(FAIL)),
    # A flagged reply runs once more, at once, while attempts remain; then it is kept.
    (Failure(flagged="truncated"), Counters(1), Decision(RETRY)),
    (Failure(flagged="truncated"), Counters(3), Decision(COMPLETE)),
    (Failure(flagged="truncated"), Counters(1, quality_retried=True), Decision(COMPLETE)),
    # A job that waits for others (a summary for its explanations): pending again at once,
    # counted, whatever its code, until its attempts run out.
    (Failure(ErrorCode.EXPLANATIONS_NEEDED, waits=True), Counters(2), Decision(RETRY)),
    (Failure(ErrorCode.EXPLANATIONS_NEEDED, waits=True), Counters(3), Decision(FAIL)),
]


@pytest.mark.parametrize("failure,counters,decision", POLICY)
def test_decide_answers_every_row_of_the_policy(failure, counters, decision):
    with override_settings(STUDYQUEUE={**JOB, **BREAKER}):
        assert retry.decide(failure, counters) == decision


def test_the_policy_table_covers_every_error_code_and_action():
    codes = {failure.code for failure, _, _ in POLICY} - {""}
    transient = codes & retry.TRANSIENT_ERRORS
    assert transient and codes - transient, "transient and permanent codes both appear"
    assert {decision.action for _, _, decision in POLICY} == set(Action)


def test_the_backoff_grows_and_is_capped():
    assert [policy().retry_delay(n) for n in (1, 2, 3, 4, 10**6)] == [10, 20, 40, 50, 50]


@pytest.mark.parametrize(
    "retry_after,expected",
    [
        (None, 10),  # no advice: the backoff
        (7, 7),
        (0, 0),
        (99999999, 50),  # honoured only up to BACKOFF_MAX_SECONDS
        (-5, 10),  # no usable advice: the backoff
        (float("nan"), 10),
        (float("inf"), 10),
    ],
)
def test_retry_delay_honours_retry_after_up_to_the_backoff_cap(retry_after, expected):
    assert policy().retry_delay(1, retry_after) == expected


def test_jitter_moves_the_backoff_within_its_fraction_and_never_the_advice():
    jittery = policy(BACKOFF_JITTER=0.2)
    delays = {jittery.retry_delay(1) for _ in range(200)}
    assert all(8 <= d <= 12 for d in delays) and len(delays) > 1
    assert {jittery.retry_delay(1, 7) for _ in range(20)} == {7}


def test_the_settings_are_read_at_each_call():
    assert policy(BACKOFF_BASE_SECONDS=1).retry_delay(1) == 1
    assert policy(BACKOFF_BASE_SECONDS=3).retry_delay(1) == 3


# --------------------------------------------------------------------------- free or counted


@pytest.mark.parametrize(
    "free_releases,reached_server,free",
    [
        (0, False, True),  # never reached the server: free, as often as it takes
        (2, False, True),
        (1000, False, True),
        (0, True, True),
        (1, True, True),
        (retry.MAX_FREE_RELEASES, True, False),  # then the failure counts
        (retry.MAX_FREE_RELEASES + 1, True, False),
    ],
)
def test_a_release_is_free_until_the_limit_for_calls_that_reached_the_server(
    free_releases, reached_server, free
):
    assert policy().release_is_free(free_releases=free_releases, reached_server=reached_server) is (
        free
    )


def test_every_job_ends_within_the_documented_number_of_calls():
    """A server that fails every call as a whole: (MAX_FREE_RELEASES + 1) x max_attempts."""
    job, calls = Counters(attempts=0), 0
    with override_settings(STUDYQUEUE={**JOB, **BREAKER}):
        while True:
            calls += 1
            job.attempts += 1  # the claim counts it
            decision = retry.decide(Failure(BUSY, affects_all=True), job)
            if decision.action is RELEASE:
                job.attempts, job.free_releases = job.attempts - 1, job.free_releases + 1
                continue
            job.free_releases = 0
            if decision.action is FAIL:
                break
    assert calls == (retry.MAX_FREE_RELEASES + 1) * job.max_attempts


# --------------------------------------------------------------------------- the breaker


@pytest.mark.parametrize(
    "failures,retry_after,pause",
    [
        (1, None, 2),
        (2, None, 4),
        (3, None, 8),
        (5, None, 32),
        (6, None, 60),  # capped by BREAKER_MAX_SECONDS
        (10**6, None, 60),  # an outage of any length pauses like its first minutes
        (1, 10, 10),  # the server's Retry-After
        (1, 0.3, 2),  # at least BREAKER_BASE_SECONDS: a "retry at once" cannot make us spin
        (1, 0, 2),
        (4, 9999, 60),  # at most BREAKER_MAX_SECONDS
        (3, -1, 8),  # no usable advice: the doubling
        (3, float("nan"), 8),
    ],
)
def test_the_breaker_pause_doubles_within_its_bounds(failures, retry_after, pause):
    assert policy().breaker_pause(failures, retry_after) == pause


@pytest.mark.parametrize("failures,pause", [(1, 2), (2, 4), (3, 5), (10, 5)])
def test_after_a_refused_connection_the_breaker_looks_again_within_seconds(failures, pause):
    """A server that is not running costs nothing to ask: the pause stops doubling at
    REFUSED_PAUSE_MAX_SECONDS, so jobs resume within seconds of its return."""
    assert policy().breaker_pause(failures, refused=True) == pause


def test_one_backoff_formula_serves_jobs_and_the_breaker():
    strategy = policy()
    assert strategy.backoff == Backoff(10, 50, 0)
    assert strategy.breaker == Backoff(2, 60)
    assert [Backoff(2, 60).delay(n) for n in (0, 1, 2, 3)] == [2, 2, 4, 8]
