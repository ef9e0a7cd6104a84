"""Pauses: the queue paused for every kind or one (``QueuePause`` rows); what a consumer
knows of them between reads is its own (``consumer.KnownPauses``)."""

from __future__ import annotations

import logging

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
