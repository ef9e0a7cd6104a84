"""django-apscheduler wiring for ``runconsumer``.

Each consumer process runs its own ``BlockingScheduler``. APScheduler 3 does not support
several schedulers sharing one job store (they run each other's jobs), so every process
keeps its own rows in django-apscheduler's tables, with ids prefixed ``studyqueue@<worker
id>/``: the admin lists each consumer's jobs and executions, and no process runs another's.

A cycle that stops with work left (budget spent, jobs due soon, a wake-up from
PostgreSQL's LISTEN/NOTIFY during the cycle) reschedules the next cycle early, so a
backlog drains at the LLM's speed and an idle consumer wakes within moments of an enqueue.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.blocking import BlockingScheduler
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_apscheduler.jobstores import DjangoJobStore
from django_apscheduler.models import DjangoJob, DjangoJobExecution
from django_apscheduler.util import close_old_connections, get_django_internal_datetime

from studyqueue import queue
from studyqueue.conf import conf
from studyqueue.consumer import CycleResult, consume_study_queue
from studyqueue.pg import psycopg_kwargs

logger = logging.getLogger("studyqueue.scheduler")

JOB_PREFIX = "studyqueue@"
DEAD_CONSUMER_AFTER = timedelta(days=1)
PARKED_SECONDS = 86400.0
ERROR_RETRY_SECONDS = 2.0


class ConsumerJobStore(DjangoJobStore):
    """A DjangoJobStore that sees only the rows of one consumer process."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def get_due_jobs(self, now):  # type: ignore[no-untyped-def]
        dt = get_django_internal_datetime(now)
        return self._get_jobs(next_run_time__lte=dt, id__startswith=self.prefix)

    def get_next_run_time(self):  # type: ignore[no-untyped-def]
        job = (
            DjangoJob.objects.filter(id__startswith=self.prefix, next_run_time__isnull=False)
            .order_by("next_run_time")
            .first()
        )
        if job is None:
            return None
        return job.next_run_time.astimezone(self._scheduler.timezone)

    def get_all_jobs(self):  # type: ignore[no-untyped-def]
        jobs = self._get_jobs(id__startswith=self.prefix)
        self._fix_paused_jobs_sorting(jobs)
        return jobs

    def remove_all_jobs(self) -> None:
        DjangoJob.objects.filter(id__startswith=self.prefix).delete()


@dataclass
class ConsumerRuntime:
    """Process-wide state of a running consumer (the scheduler's job takes no arguments:
    django-apscheduler pickles job arguments into the database)."""

    worker_id: str
    batch_size: int | None = None
    interval: float = 60.0
    stop: threading.Event = field(default_factory=threading.Event)
    scheduler: BlockingScheduler | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: bool = False
    _wake_pending: bool = False

    @property
    def prefix(self) -> str:
        return f"{JOB_PREFIX}{self.worker_id}/"

    @property
    def consume_job_id(self) -> str:
        return f"{self.prefix}consume"

    @property
    def prune_job_id(self) -> str:
        return f"{self.prefix}prune"

    def cycle(self) -> CycleResult:
        """Run one consume cycle on this thread (async ORM calls land on it too)."""
        with self._lock:
            self._running = True
        # Park the interval trigger while the cycle runs: a cycle may outlast the
        # interval (a long LLM call), and a tick then would only record "max instances".
        # after_cycle() sets the real next run when this one ends.
        self._run_at(PARKED_SECONDS)
        return async_to_sync(consume_study_queue)(
            worker_id=self.worker_id, batch_size=self.batch_size, should_stop=self.stop.is_set
        )

    def wake(self) -> None:
        """Run the next cycle now, or right after the running one."""
        with self._lock:
            if self._running or self.scheduler is None:
                self._wake_pending = True
                return
        self._run_at(0.0)

    def _run_at(self, delay: float) -> None:
        if self.scheduler is None or self.stop.is_set():
            return
        try:
            self.scheduler.modify_job(
                self.consume_job_id, next_run_time=timezone.now() + timedelta(seconds=delay)
            )
        except Exception:  # the scheduler is shutting down
            logger.debug("study_scheduler_reschedule_failed", exc_info=True)

    def after_cycle(self, event: JobEvent) -> None:
        """Scheduler listener: the next cycle runs after ``interval``, or sooner when work
        is due sooner (a backlog, a retry coming up, a wake-up during the cycle)."""
        if event.job_id != self.consume_job_id:
            return
        with self._lock:
            self._running = False
            woken, self._wake_pending = self._wake_pending, False
        delay = 0.0 if woken else self.interval
        if getattr(event, "exception", None) is not None:
            # A failed cycle (typically the database went away) is retried soon; the next
            # run starts with fresh, health-checked connections.
            delay = min(delay, ERROR_RETRY_SECONDS)
        result = getattr(event, "retval", None)
        if isinstance(result, CycleResult) and result.next_due_in is not None:
            delay = min(delay, result.next_due_in)
        self._run_at(delay)


_runtime: ConsumerRuntime | None = None


def set_runtime(runtime: ConsumerRuntime | None) -> None:
    global _runtime
    _runtime = runtime


@close_old_connections
def consume_job() -> CycleResult:
    """The scheduled consume job (module-level so the job store can reference it)."""
    if _runtime is None:
        raise RuntimeError("no consumer runtime: start it with manage.py runconsumer")
    return _runtime.cycle()


@close_old_connections
def prune_job() -> None:
    """Weekly: drop old scheduler executions, old finished jobs and dead consumers' rows."""
    days = conf.EXECUTION_HISTORY_DAYS
    DjangoJobExecution.objects.delete_old_job_executions(max_age=days * 86400)
    if conf.PRUNE_FINISHED_AFTER_DAYS > 0:
        queue.prune_finished(older_than=timedelta(days=conf.PRUNE_FINISHED_AFTER_DAYS))
    own = _runtime.prefix if _runtime else "-"
    dead = (
        DjangoJob.objects.filter(id__startswith=JOB_PREFIX)
        .exclude(id__startswith=own)
        .filter(next_run_time__lt=timezone.now() - DEAD_CONSUMER_AFTER)
    )
    deleted, _ = dead.delete()
    logger.info("study_prune executions_days=%s dead_consumer_rows=%s", days, deleted)


def build_scheduler(runtime: ConsumerRuntime) -> BlockingScheduler:
    """A scheduler with the consume job (every ``interval``) and the weekly prune."""
    scheduler = BlockingScheduler(
        timezone=settings.TIME_ZONE,
        # One worker thread: every cycle runs on the same thread and DB connection.
        executors={"default": ThreadPoolExecutor(max_workers=1)},
    )
    scheduler.add_jobstore(ConsumerJobStore(runtime.prefix), "default")
    scheduler.add_job(
        consume_job,
        trigger="interval",
        seconds=runtime.interval,
        id=runtime.consume_job_id,
        name=f"studyqueue consume ({runtime.worker_id})",
        next_run_time=timezone.now(),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(runtime.interval)),
        replace_existing=True,
    )
    scheduler.add_job(
        prune_job,
        trigger="cron",
        day_of_week="mon",
        hour=3,
        id=runtime.prune_job_id,
        name=f"studyqueue prune ({runtime.worker_id})",
        max_instances=1,
        coalesce=True,
        replace_existing=True,
    )
    scheduler.add_listener(runtime.after_cycle, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    runtime.scheduler = scheduler
    return scheduler


def listen_for_jobs(runtime: ConsumerRuntime) -> threading.Thread | None:
    """On PostgreSQL, a thread that wakes the consumer on every enqueue (LISTEN/NOTIFY).

    The interval poll stays as the fallback: a lost notification only costs latency.
    """
    if connection.vendor != "postgresql":
        return None
    params = psycopg_kwargs(connection.settings_dict)

    def run() -> None:
        while not runtime.stop.is_set():
            try:
                with psycopg.connect(autocommit=True, connect_timeout=5, **params) as conn:
                    conn.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
                    logger.info("study_listen_ready channel=%s", queue.NOTIFY_CHANNEL)
                    while not runtime.stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            runtime.wake()
            except psycopg.Error as exc:
                logger.warning("study_listen_failed error=%r; retrying", type(exc).__name__)
                runtime.stop.wait(1.0)

    thread = threading.Thread(target=run, name="studyqueue-listen", daemon=True)
    thread.start()
    return thread
