"""A circuit breaker: while the LLM server fails as a whole, stop claiming for a while."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from studyqueue.models import ErrorCode
from studyqueue.queue import retry
from studyqueue.services.llm import LLMError

logger = logging.getLogger("studyqueue.breaker")


class CircuitBreaker:
    """Tracks server-wide LLM failures and how long claiming should pause.

    How long each trip pauses is the failure policy's (``retry.RetryStrategy.breaker_pause``:
    doubling per consecutive trip, or the server's Retry-After, within ``BREAKER_BASE_SECONDS``
    and ``BREAKER_MAX_SECONDS``). Any success closes it.

    Failures that arrive together are one failure, as they are one loss for the adaptive
    gate: a call that started before the breaker's last opening (``LLMError.call_started``)
    saw the same outage as the call that opened it, so its failure neither counts another
    trip (the pause would double once per call in flight) nor logs another line.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.open_until = 0.0
        self.opened_at: float | None = None  # monotonic time of the last counted failure
        self.last_error: LLMError | None = None
        self.failing_since: datetime | None = None  # the first failure of this run of them

    def remaining(self) -> float:
        """Seconds until claiming may resume (0 when closed)."""
        return max(0.0, self.open_until - time.monotonic())

    def allows(self) -> bool:
        """Whether claiming may go on."""
        return self.remaining() == 0.0

    def trip(self, error: LLMError) -> float:
        """Record a server-wide failure; returns the pause in seconds (for the failure of
        a call already running at the last opening: what is left of that opening's)."""
        with self._lock:
            now = time.monotonic()
            started = error.call_started
            if self.opened_at is not None and started is not None and started < self.opened_at:
                return max(0.0, self.open_until - now)  # the same outage, already counted
            self.last_error = error
            self.failures += 1
            self.opened_at = now
            if self.failing_since is None:
                self.failing_since = datetime.now(UTC)
            pause = retry.strategy().breaker_pause(self.failures, error.retry_after)
            self.open_until = max(self.open_until, now + pause)
        # A rejection that hits every job is a configuration error: say so loudly.
        level = logging.ERROR if error.code == ErrorCode.LLM_REJECTED else logging.WARNING
        logger.log(
            level,
            "study_llm_paused error_code=%s failures=%s pause_s=%.1f detail=%r",
            error.code,
            self.failures,
            pause,
            error.message[:200],
        )
        return pause

    def success(self) -> None:
        """A call went through: the server is back; close the breaker."""
        with self._lock:
            was_open, self.failures, self.open_until = self.failures, 0, 0.0
            self.failing_since = self.opened_at = None
        if was_open:
            logger.info("study_llm_resumed after_failures=%s", was_open)
