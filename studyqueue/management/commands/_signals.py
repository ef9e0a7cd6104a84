"""SIGTERM and SIGINT (Ctrl-C) as a stop request, for the commands that run a consumer."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger("studyqueue.consumer")


@contextlib.contextmanager
def stop_on_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """Call ``on_stop`` on SIGTERM or SIGINT inside the block; the old handlers after it.

    Installed before anything else starts, so that a signal at any moment is a clean stop
    request, never the default abrupt exit that would orphan a child process.
    """

    def handler(signum: int, frame: Any) -> None:
        logger.warning("study_consumer_stopping signal=%s", signal.Signals(signum).name)
        on_stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
