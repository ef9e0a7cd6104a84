"""Each running consumer's record of itself (``QueueConsumer``): written at start, during
every cycle and at stop; read by the dashboard, which tells live, silent and stopped apart."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from studyqueue import queue
from studyqueue.columns import fit
from studyqueue.models import QueueConsumer

# A consumer is silent when it has not reported for this many intervals.
SILENT_AFTER_INTERVALS = 2


@dataclass(frozen=True)
class Report:
    """What a consumer says about itself at one moment."""

    jobs_running: int
    completed_since_last: int
    breaker_open: bool
    breaker_since: datetime | None
    breaker_error: str


def record_start(worker_id: str, *, interval: float, llm_url: str) -> None:
    """A consumer starts (or restarts under the same worker id)."""
    now = timezone.now()
    QueueConsumer.objects.using(queue.database()).update_or_create(
        worker_id=fit(QueueConsumer, "worker_id", worker_id),
        defaults={
            "host": fit(QueueConsumer, "host", socket.gethostname()),
            "pid": os.getpid(),
            "started_at": now,
            "seen_at": now,
            "stopped_at": None,
            "interval_seconds": interval,
            "jobs_completed": 0,
            "jobs_running": 0,
            "breaker_open": False,
            "breaker_since": None,
            "breaker_error": "",
            "llm_url": fit(QueueConsumer, "llm_url", llm_url),
            "paused_kinds": _paused(),
        },
    )


def record_report(worker_id: str, report: Report) -> None:
    """A consumer is alive: what it runs now, what it finished, its breaker."""
    worker_id = fit(QueueConsumer, "worker_id", worker_id)
    QueueConsumer.objects.using(queue.database()).filter(worker_id=worker_id).update(
        seen_at=timezone.now(),
        jobs_running=report.jobs_running,
        jobs_completed=F("jobs_completed") + report.completed_since_last,
        breaker_open=report.breaker_open,
        breaker_since=report.breaker_since,
        breaker_error=report.breaker_error,
        paused_kinds=_paused(),
    )


def record_stop(worker_id: str) -> None:
    """A consumer stopped cleanly."""
    now = timezone.now()
    worker_id = fit(QueueConsumer, "worker_id", worker_id)
    QueueConsumer.objects.using(queue.database()).filter(worker_id=worker_id).update(
        seen_at=now, stopped_at=now, jobs_running=0
    )


def _paused() -> str:
    paused = ",".join(kind or "all" for kind in queue.paused_kinds())
    return fit(QueueConsumer, "paused_kinds", paused)


@dataclass(frozen=True)
class ConsumerState:
    """A consumer as the dashboard shows it."""

    record: QueueConsumer
    state: str  # live, silent, stopped
    silent_for: timedelta | None


def consumer_states(now: datetime | None = None) -> list[ConsumerState]:
    """Every consumer that reported in the last day, live ones first."""
    now = now or timezone.now()
    rows = QueueConsumer.objects.using(queue.database()).filter(
        seen_at__gte=now - timedelta(days=1)
    )
    states = []
    for row in rows:
        quiet = now - row.seen_at
        if row.stopped_at is not None:
            state = "stopped"
        elif quiet > timedelta(seconds=SILENT_AFTER_INTERVALS * row.interval_seconds):
            state = "silent"
        else:
            state = "live"
        states.append(ConsumerState(row, state, quiet if state == "silent" else None))
    order = {"live": 0, "silent": 1, "stopped": 2}
    return sorted(states, key=lambda s: (order[s.state], s.record.worker_id))
