"""The failure policy: which failure retries, after how long, when handing a job back is free
and when it counts an attempt, when the breaker opens and how long it pauses.

Everything that decides one of these asks here (``strategy()``); nobody re-derives a delay:

- ``queue.fail`` asks ``RetryStrategy.decide``: retry (pending after a delay) or end failed;
- the handlers (``workers/base.handle_llm_error``, the ``question_changed`` rule in
  ``workers/explanation.py``) ask ``release_is_free`` before handing a job back unmetered;
- the breaker (``services/breaker.py``) asks ``breaker_pause`` for each trip.

What happened is classified where it is seen, not here: the LLM client maps a reply or a
connection failure to an ``ErrorCode`` and two facts (``services/llm.py``, and for an HTTP
status ``services/llm_reply.classify_status``): ``reached_server`` (False when the request
never got to the server) and ``affects_all`` (every job would fail the same way: a code in
``SERVER_WIDE_ERRORS``, or a rejection no job can pass, HTTP 401/403/404/405/411 or an API key
that cannot be sent). A failure that affects all opens the breaker.

Attempts are counted by the claim. Everything in the README's failure table follows from:

- a transient code (``TRANSIENT_ERRORS``) retries after ``retry_delay`` while attempts remain;
  any other code, or the last attempt, ends the job ``failed``;
- a hand-back (``queue.release``) gives the attempt back. It is free when the call never
  reached the server (as often as it takes: it costs the server nothing), or while the job's
  ``free_releases`` in a row are below ``MAX_FREE_RELEASES``; past that the failure counts
  (``queue.fail``), so a job makes at most ``(MAX_FREE_RELEASES + 1) x max_attempts`` calls
  whatever a server does. A wait at the gate that timed out counts like a call that reached
  the server (``gate_timeout_is_free``): as many waits at most, whoever holds the slot;
- one backoff formula, ``Backoff``, for a job's retries (``BACKOFF_*``) and the breaker's
  pauses (``BREAKER_*``); the server's Retry-After, when usable, replaces the formula within
  the same bounds;
- (not decided here, for completeness) a stale job counts its attempt and ends ``failed``
  (``stale``) when none is left (``queue.reset_stale``); a reply flagged by quality checks runs
  once more at once, its next claim counting an attempt (``queue.retry_for_quality``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

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
class RetryDecision:
    """What a counted failure leads to: pending again after ``delay`` seconds, or ``failed``."""

    retry: bool
    delay: float = 0.0


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

    def decide(
        self, code: str, *, attempts: int, max_attempts: int, retry_after: float | None = None
    ) -> RetryDecision:
        """Retry? When? For a counted failure with ``code`` on attempt ``attempts``."""
        if code in TRANSIENT_ERRORS and attempts < max_attempts:
            return RetryDecision(retry=True, delay=self.retry_delay(attempts, retry_after))
        return RetryDecision(retry=False)

    def retry_delay(self, attempts: int, retry_after: float | None = None) -> float:
        """Delay before a transient failure's retry: the server's Retry-After up to
        ``BACKOFF_MAX_SECONDS``; without usable advice, the backoff for retry ``attempts``."""
        return self.backoff.advised(attempts, retry_after)

    def release_is_free(self, *, free_releases: int, reached_server: bool) -> bool:
        """Whether handing the job back keeps its attempt: always when the call never reached
        the server; else while ``free_releases`` in a row stay below the limit."""
        return not reached_server or free_releases < self.max_free_releases

    def gate_timeout_is_free(self, *, free_releases: int) -> bool:
        """Whether a job that found no gate slot within ``GATE_TIMEOUT_SECONDS`` keeps its
        attempt: counted like a hand-back after a call that reached the server, so that a
        slot nobody gives back (a stuck consumer) cannot hand jobs back forever."""
        return self.release_is_free(free_releases=free_releases, reached_server=True)

    def breaker_pause(self, failures: int, retry_after: float | None = None) -> float:
        """The breaker's pause after ``failures`` server-wide failures in a row: the server's
        Retry-After kept between ``BREAKER_BASE_SECONDS`` (so that a "retry at once" cannot
        make us spin) and ``BREAKER_MAX_SECONDS``; without one, the doubling backoff."""
        return self.breaker.advised(failures, retry_after, at_least=self.breaker.base)


def strategy() -> RetryStrategy:
    """The failure policy as the settings say now (read at each call: ``override_settings``
    and a changed ``STUDYQUEUE`` take effect at once)."""
    return RetryStrategy.from_settings()


def is_transient(code: str) -> bool:
    """Whether a failure with ``code`` is retried while attempts remain."""
    return code in TRANSIENT_ERRORS


def is_loss_signal(code: str) -> bool:
    """Whether ``code`` tells the adaptive gate to halve its limit."""
    return code in LOSS_SIGNALS


def is_server_wide(code: str) -> bool:
    """Whether ``code`` describes the server as a whole (it opens the breaker)."""
    return code in SERVER_WIDE_ERRORS
