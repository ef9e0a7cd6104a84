"""A circuit breaker: while the LLM server fails as a whole, stop claiming for a while."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from studyqueue.conf import conf
from studyqueue.models import ErrorCode
from studyqueue.services.llm import LLMError

logger = logging.getLogger("studyqueue.breaker")


class CircuitBreaker:
    """Tracks server-wide LLM failures and how long claiming should pause.

    Each consecutive trip doubles the pause (``BREAKER_BASE_SECONDS`` up to
    ``BREAKER_MAX_SECONDS``) unless the server named a Retry-After, which is kept within
    the same bounds. Any success closes it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.open_until = 0.0
        self.last_error: LLMError | None = None
        self.failing_since: datetime | None = None  # the first failure of this run of them

    def remaining(self) -> float:
        """Seconds until claiming may resume (0 when closed)."""
        return max(0.0, self.open_until - time.monotonic())

    def allows(self) -> bool:
        """Whether claiming may go on."""
        return self.remaining() == 0.0

    def trip(self, error: LLMError) -> float:
        """Record a server-wide failure; returns the pause in seconds."""
        with self._lock:
            self.last_error = error
            self.failures += 1
            if self.failing_since is None:
                self.failing_since = datetime.now(UTC)
            # The exponent stops growing long before it could overflow a float: an outage
            # of any length pauses like its first minutes did.
            backoff = conf.BREAKER_BASE_SECONDS * 2 ** min(self.failures - 1, 30)
            pause = min(conf.BREAKER_MAX_SECONDS, backoff)
            # The server's Retry-After (parsed once for every caller; None when it gives
            # no usable advice) within the breaker's bounds: a "retry at once" still
            # pauses the first step, so that a server answering 429 cannot make us spin.
            if error.retry_after is not None and error.retry_after >= 0:
                pause = min(
                    max(error.retry_after, conf.BREAKER_BASE_SECONDS), conf.BREAKER_MAX_SECONDS
                )
            self.open_until = max(self.open_until, time.monotonic() + pause)
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
            self.failing_since = None
        if was_open:
            logger.warning("study_llm_resumed after_failures=%s", was_open)

    def reset(self) -> None:
        """Forget every failure (tests, operators)."""
        with self._lock:
            self.failures, self.open_until, self.failing_since = 0, 0.0, None
