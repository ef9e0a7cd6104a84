"""LISTEN/NOTIFY: how the queue tells its consumers, on PostgreSQL, that something changed
(docs/architecture.md, "Notifications"): ``JOBS_CHANNEL`` wakes them (empty payload),
``CONTROL_CHANNEL`` carries ``cancel:<job id>`` and ``pause:<kind>``, each typed (``Message``)."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connections

from studyqueue.models import MAX_ID, JobKind
from studyqueue.queue import pg, poll, sql

logger = logging.getLogger("studyqueue.notify")

JOBS_CHANNEL = "studyqueue_jobs"
CONTROL_CHANNEL = "studyqueue_control"
RETRY_SECONDS = 5.0  # while no LISTEN session can be had: how often it is tried again
POLL_SECONDS = 0.5  # how soon the listener sees a stop request


class Kind(enum.StrEnum):
    """What a notice says."""

    WAKE = "wake"  # a job may be claimable: idle consumers start a cycle
    CANCEL = "cancel"  # an operator took job ``job_id``: stop its LLM call now
    PAUSE = "pause"  # ``job_kind`` ("": every kind) is paused: hand back its waiting jobs


@dataclass(frozen=True)
class Message:
    """One notice; build it with ``wake()``, ``cancel(job_id)`` or ``pause(kind)``."""

    kind: Kind
    job_id: int | None = None
    job_kind: str = ""

    @property
    def channel(self) -> str:
        return JOBS_CHANNEL if self.kind is Kind.WAKE else CONTROL_CHANNEL

    @property
    def payload(self) -> str:
        if self.kind is Kind.WAKE:
            return ""
        return f"{self.kind}:{self.job_id if self.kind is Kind.CANCEL else self.job_kind}"


def wake() -> Message:
    """A job may be claimable."""
    return Message(Kind.WAKE)


def cancel(job_id: int) -> Message:
    """Stop the running LLM call of job ``job_id``."""
    return Message(Kind.CANCEL, job_id=_job_id(str(job_id)))


def pause(kind: str) -> Message:
    """``kind`` is paused (``""``: every kind)."""
    return Message(Kind.PAUSE, job_kind=_job_kind(kind))


def _job_id(text: str) -> int:
    # ASCII digits only: str.isdecimal() and int() also take other scripts' digits.
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_ID:
        raise ValueError(f"not a job id: {text[:40]!r}")
    return int(text)


def _job_kind(text: str) -> str:
    if text and text not in JobKind.values:
        raise ValueError(f"not a job kind: {text[:40]!r}")
    return text


def parse(channel: str, payload: str) -> Message:
    """The message a notice carries; ``ValueError`` for anything ``send`` never sends."""
    if channel == JOBS_CHANNEL and payload == "":
        return wake()
    if channel == CONTROL_CHANNEL:
        name, colon, value = payload.partition(":")
        if colon and name == Kind.CANCEL:
            return Message(Kind.CANCEL, job_id=_job_id(value))
        if colon and name == Kind.PAUSE:
            return Message(Kind.PAUSE, job_kind=_job_kind(value))
    raise ValueError(f"not a studyqueue notice: channel={channel[:40]!r} payload={payload[:40]!r}")


def send(message: Message, *, using: str) -> None:
    """Notify the consumers through ``using`` when the caller commits (SQLite's consumers poll)."""
    if sql.postgres(using):
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [message.channel, message.payload])


def listen(
    settings_dict: Mapping[str, Any],
    on_message: Callable[[Message], object],
    *,
    stopping: Callable[[], bool],
    wait: Callable[[float], object],
) -> None:
    """LISTEN on both channels and hand every message to ``on_message`` until ``stopping()``.
    While the session fails (a lost connection, an unreachable ``DIRECT_DATABASE_URL``), a
    ready job wakes the consumer each second (``poll``) and LISTEN is tried again every
    ``RETRY_SECONDS``; the failure is logged once, not per try. Blocks."""
    failing = False
    while not stopping():
        try:
            with pg.connect(settings_dict, autocommit=True) as conn:
                conn.execute(f"LISTEN {JOBS_CHANNEL}")
                conn.execute(f"LISTEN {CONTROL_CHANNEL}")
                logger.info("study_listen_ready channel=%s", JOBS_CHANNEL)
                failing = False
                while not stopping():
                    for notice in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                        _deliver(notice.channel, notice.payload, on_message)
        except psycopg.Error as exc:
            if not failing:
                logger.warning(
                    "study_listen_failed error=%s; looking for work each %gs meanwhile, "
                    "trying LISTEN again every %gs",
                    type(exc).__name__,
                    poll.POLL_SECONDS,
                    RETRY_SECONDS,
                )
            failing = True
            _poll_until_retry(on_message, wait)


def _poll_until_retry(
    on_message: Callable[[Message], object], wait: Callable[[float], object]
) -> None:
    """For ``RETRY_SECONDS`` (less if stopping): a ready job wakes the consumer (``poll``)."""
    retry_at = time.monotonic() + RETRY_SECONDS
    poll.poll(
        lambda: on_message(wake()),
        idle=lambda: True,
        wait=lambda seconds: bool(wait(seconds)) or time.monotonic() >= retry_at,
    )


def _deliver(channel: str, payload: str, on_message: Callable[[Message], object]) -> None:
    try:
        message = parse(channel, payload)
    except ValueError as exc:
        # Another program's NOTIFY on our channel, or a newer version's: not ours to act on.
        logger.warning("study_notice_refused reason=%r", str(exc))
        return
    on_message(message)


def start_listener(
    using: str,
    on_message: Callable[[Message], object],
    *,
    stopping: Callable[[], bool],
    wait: Callable[[float], object],
) -> threading.Thread | None:
    """A daemon thread running ``listen`` on a real session of database ``using``'s server
    (``pg.session_settings``); None where there is none (its consumers poll)."""
    settings_dict = pg.session_settings(using)
    if settings_dict is None:
        return None
    thread = threading.Thread(
        target=lambda: listen(settings_dict, on_message, stopping=stopping, wait=wait),
        name="studyqueue-listen",
        daemon=True,
    )
    thread.start()
    return thread
