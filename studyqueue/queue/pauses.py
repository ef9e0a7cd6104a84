"""Pauses: the queue paused for every kind or one (``QueuePause`` rows), and what a consumer
knows of them between reads (``KnownPauses``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable

from django.db.models import QuerySet

from studyqueue.models import QueuePause, fit
from studyqueue.queue import notify
from studyqueue.queue.transitions import validate_kind

logger = logging.getLogger("studyqueue.queue")


def pause(kind: str = "", *, reason: str = "", by: str = "") -> tuple[QueuePause, bool]:
    """Pause the queue for ``kind`` (blank: every kind) until ``resume``; the pause, and whether
    this call made it (the first pause is kept)."""
    if kind:
        validate_kind(kind)
    pauses = QueuePause.objects.all()
    row, created = pauses.get_or_create(
        kind=kind,
        defaults={
            "reason": fit(QueuePause, "reason", reason),
            "paused_by": fit(QueuePause, "paused_by", by),
        },
    )
    if created:
        logger.warning(
            "study_queue_paused kind=%s by=%s reason=%r", kind or "all", by or "-", reason
        )
        notify.send(notify.pause(kind), using=pauses.db)
    return row, created


def resume(kind: str = "") -> bool:
    """Lift the pause for ``kind`` (blank: the pause of every kind); whether there was one."""
    pauses = QueuePause.objects.filter(kind=kind)
    deleted, _ = pauses.delete()
    if deleted:
        logger.warning("study_queue_resumed kind=%s", kind or "all")
        notify.send(notify.wake(), using=pauses.db)  # idle consumers claim at once
    return bool(deleted)


def _paused() -> QuerySet[QueuePause, str]:
    return QueuePause.objects.values_list("kind", flat=True)


def paused_kinds() -> list[str]:
    """The paused kinds (``""`` stands for every kind)."""
    return list(_paused())


async def apaused_kinds() -> list[str]:
    """``paused_kinds()`` through the async ORM."""
    return [kind async for kind in _paused()]


def is_paused(kind: str, paused: Iterable[str]) -> bool:
    """Whether ``kind`` is among ``paused`` (``paused_kinds()``), directly or as every kind."""
    return any(p in ("", kind) for p in paused)


def paused_message(kind: str, paused: list[str]) -> str:
    """Why a claimed job was handed back before its LLM call: its kind was paused."""
    scope = "every kind" if "" in paused else kind
    return f"the queue was paused ({scope}) before the LLM call started; handed back"


class KnownPauses:
    """The paused kinds (``""``: every kind) as last noticed or read (thread-safe: the
    LISTEN thread notes notices, the consumer's loop reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kinds: frozenset[str] = frozenset()
        self._notices = 0  # bumped by every notice: a read started before one may miss it

    def may_be_paused(self, kind: str) -> bool:
        """Whether ``kind`` may be paused: True means "confirm in the database"."""
        return is_paused(kind, self.kinds)

    def noticed(self, kind: str) -> None:
        """A pause of ``kind`` was announced (its ``NOTIFY``)."""
        with self._lock:
            self.kinds |= {kind}
            self._notices += 1

    def reading(self) -> int:
        """Call before reading the pauses; hand the result to ``read``."""
        return self._notices

    async def last_look(self, kind: str, read: Callable[[], Awaitable[list[str]]]) -> str | None:
        """Why a job of ``kind`` is held back right before its LLM call, or None; ``read`` from
        the database only when the pauses known here name the kind (the hot path)."""
        if not self.may_be_paused(kind):
            return None
        started = self.reading()
        paused = await read()
        self.read(paused, started=started)
        return paused_message(kind, paused) if is_paused(kind, paused) else None

    def read(self, kinds: Iterable[str], *, started: int) -> None:
        """The pauses a read begun at ``started`` found; a notice during the read is kept."""
        found = frozenset(kinds)
        with self._lock:
            self.kinds = found if started == self._notices else self.kinds | found
