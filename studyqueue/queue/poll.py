"""Where no LISTEN is possible (SQLite, a pooler without ``DIRECT_DATABASE_URL``), how an idle
consumer learns that a job is ready: one indexed ``EXISTS`` each second, on a thread, instead of
waiting for its interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connections

from studyqueue.queue import pg, transitions

logger = logging.getLogger("studyqueue.poll")

POLL_SECONDS = 1.0


def poll(
    on_ready: Callable[[], object], *, idle: Callable[[], bool], wait: Callable[[float], bool]
) -> None:
    """Every ``POLL_SECONDS`` while ``idle()``, ``on_ready()`` if a job is ready; until ``wait``."""
    failing = False
    try:
        while not wait(POLL_SECONDS):
            if not idle():
                continue  # a running cycle claims what is ready itself
            close_old_connections()
            try:
                ready = transitions.has_ready()
            except DatabaseError as exc:
                # Once per failure streak: the consumer's own cycles report the outage.
                if not failing:
                    logger.warning("study_poll_failed error=%s", type(exc).__name__)
                failing = True
                continue
            failing = False
            if ready:
                on_ready()
    finally:
        connections.close_all()  # this thread's own connection


def start_poller(
    using: str,
    on_ready: Callable[[], object],
    *,
    idle: Callable[[], bool],
    wait: Callable[[float], bool],
) -> threading.Thread | None:
    """A daemon thread running ``poll`` where ``using`` has no session to LISTEN on, else None."""
    if pg.session_settings(using) is not None:
        return None
    thread = threading.Thread(
        target=lambda: poll(on_ready, idle=idle, wait=wait), name="studyqueue-poll", daemon=True
    )
    thread.start()
    logger.info("study_poll_ready interval_s=%s mode=%s", POLL_SECONDS, pg.mode(using))
    return thread
