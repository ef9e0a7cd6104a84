"""The failure policy: ``decide`` says what a failure leads to (retry after a backoff, fail,
hand back with the attempt kept, or keep a flagged reply; whether the breaker opens), and every
failure path only applies its answer (docs/reference/queue.md, "One decision for every
failure")."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from studyqueue.conf import conf
from studyqueue.models import ErrorCode

# Retried with backoff until max_attempts; all other codes end the job at once.
TRANSIENT_ERRORS = frozenset(
    {
        ErrorCode.LLM_UNAVAILABLE,
        ErrorCode.LLM_TIMEOUT,
        ErrorCode.LLM_OVERLOADED,
        ErrorCode.LLM_SERVER_ERROR,
        ErrorCode.LLM_BAD_RESPONSE,
        ErrorCode.LLM_EMPTY,
        ErrorCode.STALE,
        ErrorCode.INTERNAL,
        ErrorCode.QUESTION_CHANGED,
        ErrorCode.WEBHOOK_FAILED,
    }
)

# Codes that describe the server, not the job: every job would fail alike, so they open the
# breaker and the job waits without losing an attempt.
SERVER_WIDE_ERRORS = frozenset({ErrorCode.LLM_UNAVAILABLE, ErrorCode.LLM_OVERLOADED})

# Codes that say the server had more calls than it could bear (429/503, a timeout or a
# stall, a refused connection): the adaptive gate halves its limit on them.
LOSS_SIGNALS = frozenset(
    {ErrorCode.LLM_OVERLOADED, ErrorCode.LLM_TIMEOUT, ErrorCode.LLM_UNAVAILABLE}
)

# The longest breaker pause after a refused connection (the server is not running): a
# refused connect costs the server nothing, so the consumer looks again this often and resumes
# within seconds of the server's return. A larger BREAKER_BASE_SECONDS wins.
REFUSED_PAUSE_MAX_SECONDS = 5.0

# Hand-backs in a row, after calls that reached the server, that keep the job's attempt.
MAX_FREE_RELEASES = 2

# The exponent stops growing here: 2 ** 60 dwarfs any sane cap, and the float never overflows.
_MAX_EXPONENT = 60


@dataclass(frozen=True)
class Backoff:
    """``base`` for step 1, doubling per step up to ``cap``, moved by up to +/- ``jitter``."""

    base: float
    cap: float
    jitter: float = 0.0

    def delay(self, step: int) -> float:
        """Seconds to wait before step ``step`` (1 for the first)."""
        delay = min(self.base * 2 ** min(max(step - 1, 0), _MAX_EXPONENT), self.cap)
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, delay)

    def advised(self, step: int, retry_after: float | None, *, at_least: float = 0.0) -> float:
        """The server's Retry-After kept between ``at_least`` and ``cap`` (no jitter: it named
        a time); without a usable one, ``delay(step)``."""
        if retry_after is None or not math.isfinite(retry_after) or retry_after < 0:
            return self.delay(step)  # no advice at all
        return min(max(retry_after, at_least), self.cap)


@dataclass(frozen=True)
class RetryStrategy:
    """The policy with its numbers: ``strategy()`` builds it from the settings in force."""

    backoff: Backoff  # a job's counted retries
    breaker: Backoff  # the breaker's pauses while the server fails as a whole

    def retry_delay(self, attempts: int, retry_after: float | None = None) -> float:
        """Delay before a transient failure's retry (``Backoff.advised``)."""
        return self.backoff.advised(attempts, retry_after)

    def release_is_free(self, *, free_releases: int, reached_server: bool) -> bool:
        """Whether handing the job back keeps its attempt."""
        return not reached_server or free_releases < MAX_FREE_RELEASES

    def breaker_pause(
        self, failures: int, retry_after: float | None = None, *, refused: bool = False
    ) -> float:
        """The breaker's pause after ``failures`` server-wide failures in a row, at least its
        base (a "retry at once" must not make us spin); after a ``refused`` connection, at
        most ``REFUSED_PAUSE_MAX_SECONDS`` (or the base)."""
        pause = self.breaker.advised(failures, retry_after, at_least=self.breaker.base)
        return min(pause, max(REFUSED_PAUSE_MAX_SECONDS, self.breaker.base)) if refused else pause


class Action(StrEnum):
    """What a failure leads to."""

    RETRY = "retry"  # pending again after the decision's delay; the attempt counted
    FAIL = "fail"  # failed for good
    RELEASE = "release"  # handed back, the attempt kept
    COMPLETE = "complete"  # a flagged reply is kept as it is: the job completes


@dataclass(frozen=True)
class Failure:
    """What went wrong with a claimed job, as ``decide`` needs to know it."""

    code: str = ""  # the ``ErrorCode`` (empty for a flagged reply)
    message: str = ""
    reached_server: bool = True  # the request got to the server
    affects_all: bool = False  # every job would fail alike (the server as a whole)
    # False for what the job did not cause (a gate timeout, a question edited during its
    # call): handed back while that is free.
    job_at_fault: bool = True
    retry_after: float | None = None  # the server's advice
    flagged: str = ""  # a reply's flag that earns one more run
    # The job waits for other jobs (a summary for its explanations), which the claim holds it
    # back for: pending again at once, each wait counted so that a wait without end fails.
    waits: bool = False


class Tally(Protocol):
    """A job's counters, as claimed: a ``StudyQuestionJob`` is one."""

    attempts: int
    max_attempts: int
    free_releases: int
    quality_retried: bool


@dataclass(frozen=True)
class Decision:
    """``decide``'s answer: the action, its delay in seconds, and whether the breaker opens."""

    action: Action
    delay: float = 0.0
    pause_server: bool = False


def decide(failure: Failure, tally: Tally) -> Decision:
    """What ``failure`` of a job with counters ``tally`` leads to (the module's rules)."""
    policy = strategy()
    if failure.waits:
        return Decision(Action.RETRY if tally.attempts < tally.max_attempts else Action.FAIL)
    if failure.flagged:
        if tally.quality_retried or tally.attempts >= tally.max_attempts:
            return Decision(Action.COMPLETE)
        return Decision(Action.RETRY)
    pause = failure.affects_all
    if (pause or not failure.job_at_fault) and policy.release_is_free(
        free_releases=tally.free_releases, reached_server=failure.reached_server
    ):
        return Decision(Action.RELEASE, pause_server=pause)
    if failure.code not in TRANSIENT_ERRORS or tally.attempts >= tally.max_attempts:
        return Decision(Action.FAIL, pause_server=pause)
    if failure.code == ErrorCode.STALE:
        return Decision(Action.RETRY, pause_server=pause)  # its worker died, not the server
    delay = policy.retry_delay(tally.attempts, failure.retry_after)
    return Decision(Action.RETRY, delay, pause_server=pause)


def strategy() -> RetryStrategy:
    """The failure policy as the settings say now (read at each call)."""
    return RetryStrategy(
        backoff=Backoff(conf.BACKOFF_BASE_SECONDS, conf.BACKOFF_MAX_SECONDS, conf.BACKOFF_JITTER),
        breaker=Backoff(conf.BREAKER_BASE_SECONDS, conf.BREAKER_MAX_SECONDS),
    )
