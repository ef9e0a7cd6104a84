"""Each running consumer's record of itself (``QueueConsumer``), written at start, every cycle
and stop: whether it lives, and what it writes with (what "outdated" is measured against)."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from studyqueue.conf import conf
from studyqueue.models import QueueConsumer, fit
from studyqueue.queue.pauses import paused_kinds

logger = logging.getLogger("studyqueue.presence")

# A consumer is silent when it has not reported for this many intervals.
SILENT_AFTER_INTERVALS = 2
# The panel shows consumers that reported within this; older records are deleted.
KEPT_FOR = timedelta(days=1)


@dataclass(frozen=True)
class Report:
    """What a consumer says about itself at one moment."""

    breaker_open: bool
    breaker_since: datetime | None
    breaker_error: str
    gate_limit: int | None = None  # concurrent LLM calls its gates allow now, together
    endpoints: list[dict[str, Any]] = field(default_factory=list)  # each server's state


class PromptShown(Protocol):
    """A prompt version as a record shows it (``explanations.prompts.PromptVersion``)."""

    @property
    def hash(self) -> str: ...

    @property
    def label(self) -> str: ...


def _reported(report: Report, prompt: PromptShown, now: datetime) -> dict[str, object]:
    """A record's fields as of ``report``, with what this process's settings and templates
    write with."""
    return {
        "seen_at": now,
        **asdict(report),  # its fields are the record's
        "paused_kinds": paused_kinds(),
        "model": fit(QueueConsumer, "model", conf.LLM_MODEL),
        "prompt_version": prompt.hash,
        "prompt_label": fit(QueueConsumer, "prompt_label", prompt.label),
    }


def prune(now: datetime) -> None:
    """Delete the records of consumers silent or stopped for longer than ``KEPT_FOR``."""
    QueueConsumer.objects.filter(seen_at__lt=now - KEPT_FOR).delete()


# What this process wrote at each consumer's start, by worker id (a process may run several:
# the tests): enough to write the whole record again should it be deleted while it runs.
_started: dict[str, dict[str, object]] = {}


def record_start(
    worker_id: str, *, interval: float, llm_url: str, prompt: PromptShown, gate: str = ""
) -> None:
    """A consumer starts (or restarts under the same worker id); old records go."""
    now = timezone.now()
    prune(now)
    worker_id = fit(QueueConsumer, "worker_id", worker_id)
    started: dict[str, object] = {
        "host": fit(QueueConsumer, "host", socket.gethostname()),
        "pid": os.getpid(),
        "started_at": now,
        "interval_seconds": interval,
        "llm_url": fit(QueueConsumer, "llm_url", llm_url),
        "gate_permits": fit(QueueConsumer, "gate_permits", gate),
    }
    _started[worker_id] = started
    fields = _reported(Report(False, None, ""), prompt, now)  # breaker closed, no limit yet
    del fields["endpoints"]  # none reported yet: the last run's stay until this run's first
    QueueConsumer.objects.update_or_create(
        worker_id=worker_id, defaults={**started, **fields, "stopped_at": None}
    )


def record_report(worker_id: str, report: Report, *, prompt: PromptShown) -> None:
    """A consumer is alive; its record is written whole again when it was deleted."""
    worker_id = fit(QueueConsumer, "worker_id", worker_id)
    started = _started.get(worker_id)
    fields = _reported(report, prompt, timezone.now())
    records = QueueConsumer.objects
    updated = records.filter(worker_id=worker_id).update(**fields)
    if updated or started is None:
        return  # written; or not started by this process: nothing to write it again from
    # update_or_create: a concurrent report of the same worker id may write it first.
    records.update_or_create(
        worker_id=worker_id, defaults={**started, **fields, "stopped_at": None}
    )
    logger.info("study_consumer_record_restored worker=%s", worker_id)


def record_stop(worker_id: str) -> None:
    """A consumer stopped cleanly; old records go."""
    now = timezone.now()
    worker_id = fit(QueueConsumer, "worker_id", worker_id)
    _started.pop(worker_id, None)
    QueueConsumer.objects.filter(worker_id=worker_id).update(seen_at=now, stopped_at=now)
    prune(now)


class Liveness(models.TextChoices):
    """How a consumer looks from its reports; the members are in the dashboard's order."""

    LIVE = "live", _("live")  # reported within SILENT_AFTER_INTERVALS of its interval
    SILENT = "silent", _("silent")  # no report for longer: crashed, hung, or its host is down
    STOPPED = "stopped", _("stopped")  # shut down cleanly


_ORDER = {state: n for n, state in enumerate(Liveness)}


@dataclass(frozen=True)
class ConsumerState:
    """A consumer as the dashboard shows it."""

    record: QueueConsumer
    state: Liveness
    silent_for: timedelta | None

    @property
    def live(self) -> bool:
        return self.state is Liveness.LIVE


def consumer_states(now: datetime | None = None) -> list[ConsumerState]:
    """Every consumer that reported within ``KEPT_FOR``, live ones first."""
    now = now or timezone.now()
    rows = QueueConsumer.objects.filter(seen_at__gte=now - KEPT_FOR)
    states = [state_of(row, now) for row in rows]
    return sorted(states, key=lambda s: (_ORDER[s.state], s.record.worker_id))


def state_of(row: QueueConsumer, now: datetime) -> ConsumerState:
    """How one record looks at ``now``."""
    quiet = now - row.seen_at
    if row.stopped_at is not None:
        state = Liveness.STOPPED
    elif quiet > timedelta(seconds=SILENT_AFTER_INTERVALS * row.interval_seconds):
        state = Liveness.SILENT
    else:
        state = Liveness.LIVE
    return ConsumerState(row, state, quiet if state is Liveness.SILENT else None)


def reported_endpoints(record: QueueConsumer) -> list[dict[str, Any]]:
    """Its last report of each server (``QueueConsumer.endpoints``), entries that name one."""
    entries = [e for e in record.endpoints if isinstance(e, dict)]
    return [e for e in entries if isinstance(e.get("name"), str) and e["name"]]


def gate_url(record: QueueConsumer) -> str:
    """The URL its one server's gate is named by: the reported name, whole (``llm_url`` is cut
    to its column, and joins several servers' URLs)."""
    reported = reported_endpoints(record)
    return reported[0]["name"] if len(reported) == 1 else record.llm_url


def live_consumers(now: datetime | None = None) -> list[ConsumerState]:
    """The consumers that reported within two of their intervals."""
    return [s for s in consumer_states(now) if s.live]
