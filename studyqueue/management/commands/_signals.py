"""Stop signals as a stop request, for the commands that run a consumer or a job."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger("studyqueue.consumer")

# Every catchable signal whose default action ends the process: a terminal's or a supervisor's
# (SIGHUP when the terminal closes, SIGINT, SIGQUIT, SIGTERM) and the rarer user, timer and
# resource-limit ones. Left at their defaults: SIGKILL and SIGSTOP (cannot be caught), the
# faults (SIGSEGV, SIGBUS…: the process is broken, no clean stop is possible), and SIGPIPE
# (Python ignores it; a broken pipe is an OSError where it happens).
_STOP_SIGNAL_NAMES = [
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
    "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGIO", "SIGPWR", "SIGSTKFLT",
]  # fmt: skip
# The platform's signals only (macOS has no SIGPWR, Windows few of them).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in _STOP_SIGNAL_NAMES if hasattr(signal, name)
)


@contextlib.contextmanager
def stop_on_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """Call ``on_stop`` on any of ``STOP_SIGNALS`` inside the block (never the abrupt exit that
    would orphan a child or leave a job processing); the old handlers after."""

    def handler(signum: int, frame: Any) -> None:
        logger.warning("study_consumer_stopping signal=%s", signal.Signals(signum).name)
        on_stop()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
