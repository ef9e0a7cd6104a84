"""Reclaiming a gate slot from a stuck holder (PostgreSQL).

A slot is a session advisory lock: PostgreSQL frees it when its holder's session ends, not
when the holder stops working. A consumer frozen while it holds a slot (SIGSTOP, a hung
host, a VM paused) keeps its session, so with one permit every other consumer's job would
wait at the gate for good. A consumer kept waiting (``LLMGate`` calls ``reclaim_stuck_slots``)
terminates the holding session, only when it can prove the holder silent past the stall
bound (``STALE_MINUTES``, after which its jobs count as stale anyway):

- the session names its consumer (``gate.holder_tag``, set as it takes slots); a session
  that names none (another program, ``manage.py explain``) is never touched;
- that consumer's record (``QueueConsumer``) is not stopped, and has not reported for longer
  than the bound and than the dashboard's "silent" (two of its intervals);
- none of its processing jobs has a heartbeat within the bound.

Fencing: its processing jobs are reset as stale first (``queue.reset_stale``: claim token
cleared, attempt closed), in a transaction that locks them, and the session is terminated
only after that commits. When the frozen consumer resumes, each of its writes is fenced by
the claim token it no longer holds, and its first heartbeat (overdue by then) is refused and
cancels its call. The session is terminated only if it still holds that slot's lock.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import connections, transaction
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.models import JobStatus, QueueConsumer, StudyQuestionJob
from studyqueue.queue import transitions as queue
from studyqueue.queue.presence import SILENT_AFTER_INTERVALS
from studyqueue.services.gate import LOCK_NAMESPACE, holder_tag

logger = logging.getLogger("studyqueue.gate")

# The sessions holding the given slots' locks in this database, and the name each gave.
_HOLDERS = """
SELECT l.objid::bigint, l.pid, a.application_name
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid::bigint = %s AND l.objid::bigint = ANY(%s)
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.pid <> pg_backend_pid()
"""
# Terminate the session only while it still holds that lock (not a new session that reused
# its process id).
_TERMINATE = """
SELECT pg_terminate_backend(l.pid)
FROM pg_locks AS l
WHERE l.pid = %s AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid::bigint = %s AND l.objid::bigint = %s
"""


def stall_bound() -> timedelta:
    """How long a holder must have been silent: ``STALE_MINUTES``."""
    return timedelta(minutes=conf.STALE_MINUTES)


def _silent_consumers(db: str, tags: set[str]) -> dict[str, QueueConsumer]:
    """The consumers, by their session's tag, among ``tags`` silent past the stall bound."""
    now = timezone.now()
    candidates = QueueConsumer.objects.using(db).filter(
        stopped_at__isnull=True, seen_at__lt=now - stall_bound()
    )
    silent = {}
    for consumer in candidates:
        quiet = now - consumer.seen_at
        if quiet <= timedelta(seconds=SILENT_AFTER_INTERVALS * consumer.interval_seconds):
            continue  # its own interval is longer: not silent by the dashboard's rule either
        tag = holder_tag(consumer.worker_id)
        if tag in tags:
            silent[tag] = consumer
    return silent


def _fence_jobs(db: str, worker_id: str) -> list[int] | None:
    """Reset the consumer's processing jobs as stale; None if one of them has a heartbeat
    within the bound (it is not stuck after all) and nothing was changed."""
    cutoff = timezone.now() - stall_bound()
    jobs = StudyQuestionJob.objects.using(db).filter(
        worker_id=worker_id, status=JobStatus.PROCESSING
    )
    with transaction.atomic(using=db):
        # Locked until the commit: a heartbeat of the consumer resuming now waits, then
        # finds its claim gone.
        rows = list(jobs.select_for_update().values_list("pk", "heartbeat_at"))
        if any(beat is None or beat >= cutoff for _, beat in rows):
            return None
        ids = [pk for pk, _ in rows]
        if ids:
            queue.reset_stale(older_than=stall_bound(), job_ids=ids)
    return ids


def reclaim_stuck_slots(db: str, endpoint: str, slots: dict[int, int]) -> int:
    """Free those of ``slots`` ({slot: lock key}) whose holding session belongs to a
    consumer silent past the stall bound (see the module); how many were freed."""
    slot_of = {key: slot for slot, key in slots.items()}
    with connections[db].cursor() as cursor:
        cursor.execute(_HOLDERS, [LOCK_NAMESPACE, list(slot_of)])
        holders = cursor.fetchall()
    if not holders:
        return 0
    silent = _silent_consumers(db, {name for _, _, name in holders})
    freed = 0
    for key, pid, name in holders:
        consumer = silent.get(name)
        if consumer is None:
            continue  # live, stopped, or not a consumer's session: not proven stuck
        reset = _fence_jobs(db, consumer.worker_id)
        if reset is None:
            continue
        with connections[db].cursor() as cursor:
            cursor.execute(_TERMINATE, [pid, LOCK_NAMESPACE, key])
            row = cursor.fetchone()
        terminated = bool(row and row[0])
        silent_s = (timezone.now() - consumer.seen_at).total_seconds()
        logger.warning(
            "study_gate_slot_reclaimed endpoint=%s slot=%s holder=%s backend_pid=%s "
            "silent_s=%.0f jobs_reset=%s terminated=%s",
            endpoint,
            slot_of[key],
            consumer.worker_id,
            pid,
            silent_s,
            ",".join(map(str, reset)) or "-",
            terminated,
        )
        freed += terminated
    return freed
