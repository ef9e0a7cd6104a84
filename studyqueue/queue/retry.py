"""The failure policy: one function, ``decide``, says what a failure leads to, and every
failure path asks it and only applies the answer.

``decide(failure, tally)`` takes what happened (``Failure``: an error code and the facts the
LLM client classified, ``reached_server`` and ``affects_all``, or that the job was not at
fault: a wait at the gate that timed out, a question edited during the call, a stale job,
a reply flagged by the quality checks) and the job's counters (``Tally``: attempts used and
allowed, free hand-backs in a row, whether its quality retry is spent), and returns a
``Decision``: ``retry`` (pending again after ``delay``, the attempt counted), ``fail`` (for
good), ``release`` (handed back, the attempt kept), or ``complete`` (a flagged reply is kept
as it is); and ``pause_server`` when every job would fail alike (the breaker opens).

The rules, each a row of the table in tests/queue/test_retry.py:

- a failure that affects every job (a code in ``SERVER_WIDE_ERRORS``, or a rejection no job
  can pass) pauses the server, and so does nothing against the job: like the failures that
  are not the job's fault (a gate timeout, a question changed during the call) it hands the
  job back while that is free: always when the call never reached the server (it cost the
  server nothing), else while the job's ``free_releases`` in a row stay below
  ``MAX_FREE_RELEASES``; past that the failure counts, so a job makes at most
  ``(MAX_FREE_RELEASES + 1) x max_attempts`` calls whatever a server does;
- a counted failure with a transient code (``TRANSIENT_ERRORS``) retries after the backoff
  (``BACKOFF_*``; the server's Retry-After, when usable, within the same bounds) while
  attempts remain; a stale job retries at once; any other code, or the last attempt, fails;
- a reply flagged with a flag in ``QUALITY_RETRY`` runs once more, at once, while attempts
  remain; a second flagged reply is kept;
- the breaker's pauses follow the same ``Backoff`` formula (``BREAKER_*``), at most
  ``REFUSED_PAUSE_MAX_SECONDS`` after a refused connection (it costs the server nothing).

What happened is classified where it is seen, not here: the LLM client maps a reply or a
connection failure to an ``ErrorCode`` and the two facts (``services/llm.py``,
``services/replies.classify_status``).
"""

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
# within seconds of the server's return (the doubling pauses, up to BREAKER_MAX_SECONDS,
# kept it waiting half a minute after a restart). A larger BREAKER_BASE_SECONDS wins.
REFUSED_PAUSE_MAX_SECONDS = 5.0

# Hand-backs in a row, after calls that reached the server, that keep the job's attempt.
MAX_FREE_RELEASES = 2

# The exponent stops growing here: 2 ** 60 dwarfs any sane cap, and the float never overflows.
_MAX_EXPONENT = 60


def usable_retry_after(retry_after: float | None) -> float | None:
    """The server's Retry-After in seconds if it is advice at all (finite, not negative)."""
    if retry_after is None or not math.isfinite(retry_after) or retry_after < 0:
        return None
    return retry_after


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``base`` for step 1, doubling per step up to ``cap``; each delay
    moved by a random fraction of up to +/- ``jitter``."""

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
        """The server's usable Retry-After kept between ``at_least`` and ``cap`` (no jitter:
        the server named a time); without one, ``delay(step)``."""
        advice = usable_retry_after(retry_after)
        if advice is None:
            return self.delay(step)
        return min(max(advice, at_least), self.cap)


@dataclass(frozen=True)
class RetryStrategy:
    """The policy with its numbers: ``strategy()`` builds it from the settings in force."""

    backoff: Backoff  # a job's counted retries
    breaker: Backoff  # the breaker's pauses while the server fails as a whole
    max_free_releases: int = MAX_FREE_RELEASES

    @classmethod
    def from_settings(cls) -> RetryStrategy:
        return cls(
            backoff=Backoff(
                conf.BACKOFF_BASE_SECONDS, conf.BACKOFF_MAX_SECONDS, conf.BACKOFF_JITTER
            ),
            breaker=Backoff(conf.BREAKER_BASE_SECONDS, conf.BREAKER_MAX_SECONDS),
        )

    def retry_delay(self, attempts: int, retry_after: float | None = None) -> float:
        """Delay before a transient failure's retry: the server's Retry-After up to
        ``BACKOFF_MAX_SECONDS``; without usable advice, the backoff for retry ``attempts``."""
        return self.backoff.advised(attempts, retry_after)

    def release_is_free(self, *, free_releases: int, reached_server: bool) -> bool:
        """Whether handing the job back keeps its attempt: always when the call never reached
        the server; else while ``free_releases`` in a row stay below the limit."""
        return not reached_server or free_releases < self.max_free_releases

    def breaker_pause(
        self, failures: int, retry_after: float | None = None, *, refused: bool = False
    ) -> float:
        """The breaker's pause after ``failures`` server-wide failures in a row: the server's
        Retry-After kept between ``BREAKER_BASE_SECONDS`` (so that a "retry at once" cannot
        make us spin) and ``BREAKER_MAX_SECONDS``; without one, the doubling backoff. After
        a ``refused`` connection, at most ``REFUSED_PAUSE_MAX_SECONDS`` (or the base)."""
        pause = self.breaker.advised(failures, retry_after, at_least=self.breaker.base)
        if refused:
            return min(pause, max(REFUSED_PAUSE_MAX_SECONDS, self.breaker.base))
        return pause


class Action(StrEnum):
    """What a failure leads to."""

    RETRY = "retry"  # pending again after the decision's delay; the attempt counted
    FAIL = "fail"  # failed for good
    RELEASE = "release"  # handed back, the attempt kept
    COMPLETE = "complete"  # a flagged reply is kept as it is: the job completes


@dataclass(frozen=True)
class Failure:
    """What went wrong with a claimed job, as ``decide`` needs to know it.

    ``code``: the ``ErrorCode`` (empty for a flagged reply). ``reached_server``: the request
    got to the server. ``affects_all``: every job would fail alike (the server as a whole).
    ``job_at_fault``: False for what the job did not cause (a gate timeout, a question
    edited during its call): handed back while that is free. ``retry_after``: the server's
    advice. ``flagged``: a reply flagged with a flag that earns one more run."""

    code: str = ""
    message: str = ""
    reached_server: bool = True
    affects_all: bool = False
    job_at_fault: bool = True
    retry_after: float | None = None
    flagged: str = ""


class Tally(Protocol):
    """A job's counters, as claimed: a ``StudyQuestionJob`` is one."""

    attempts: int
    max_attempts: int
    free_releases: int
    quality_retried: bool


@dataclass(frozen=True)
class Decision:
    """``decide``'s answer: the action, its delay in seconds (``RELEASE`` with
    ``pause_server``: the breaker's pause, known once it is tripped), and whether the server
    is paused for every job (the breaker opens)."""

    action: Action
    delay: float = 0.0
    pause_server: bool = False


def decide(failure: Failure, tally: Tally) -> Decision:
    """What ``failure`` of a job with counters ``tally`` leads to (the module's rules)."""
    policy = strategy()
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
    """The failure policy as the settings say now (read at each call: ``override_settings``
    and a changed ``STUDYQUEUE`` take effect at once)."""
    return RetryStrategy.from_settings()


def is_loss_signal(code: str) -> bool:
    """Whether ``code`` tells the adaptive gate to halve its limit."""
    return code in LOSS_SIGNALS


def is_server_wide(code: str) -> bool:
    """Whether ``code`` describes the server as a whole (it opens the breaker)."""
    return code in SERVER_WIDE_ERRORS
