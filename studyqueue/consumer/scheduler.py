"""django-apscheduler wiring for ``runconsumer``: the consume cycle as a scheduled job, brought
forward by work left or a wake-up, never before the breaker's pause ends. Each consumer process
runs its own scheduler with its own rows (ids ``studyqueue@<worker id>/``): APScheduler 3
schedulers sharing one job store run each other's jobs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job as SchedulerJob
from apscheduler.schedulers.background import BackgroundScheduler
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext
from django_apscheduler.jobstores import DjangoJobStore
from django_apscheduler.models import DjangoJob, DjangoJobExecution
from django_apscheduler.util import close_old_connections

from studyqueue.conf import conf
from studyqueue.consumer.consumer import Consumer, CycleResult
from studyqueue.queue import notify, pg, poll
from studyqueue.queue.operations import prune_finished
from studyqueue.services import endpoints
from studyqueue.sessions import xapi

logger = logging.getLogger("studyqueue.scheduler")

JOB_PREFIX = "studyqueue@"
DEAD_CONSUMER_AFTER = timedelta(days=1)
PARKED_SECONDS = 86400.0
ERROR_RETRY_SECONDS = 2.0


def job_prefix(worker_id: str) -> str:
    """The id prefix of one consumer's rows in django-apscheduler's tables."""
    return f"{JOB_PREFIX}{worker_id}/"


class ConsumerJobStore(DjangoJobStore):
    """A DjangoJobStore that sees only the rows of one consumer process."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def _own(self, jobs: list[SchedulerJob]) -> list[SchedulerJob]:
        return [job for job in jobs if job.id.startswith(self.prefix)]

    def get_due_jobs(self, now: datetime) -> list[SchedulerJob]:
        return self._own(super().get_due_jobs(now))

    def get_all_jobs(self) -> list[SchedulerJob]:
        return self._own(super().get_all_jobs())

    def get_next_run_time(self) -> datetime | None:
        return min((j.next_run_time for j in self.get_all_jobs() if j.next_run_time), default=None)

    def remove_all_jobs(self) -> None:
        DjangoJob.objects.filter(id__startswith=self.prefix).delete()


# The scheduler's job store keeps a job as a reference to a module-level function and
# pickles its arguments into the database, so the running consumer cannot be passed to
# it: ``consume_job`` finds it here by worker id. One entry per scheduler in the process.
_running: dict[str, ScheduledConsumer] = {}


@close_old_connections
def consume_job(worker_id: str) -> CycleResult:
    """The scheduled consume job: one cycle of this process's consumer."""
    return _running[worker_id].cycle()


@close_old_connections
def prune_job(worker_id: str = "") -> None:
    """Weekly: drop old scheduler executions, old finished jobs and dead consumers' rows."""
    days = conf.EXECUTION_HISTORY_DAYS
    DjangoJobExecution.objects.delete_old_job_executions(max_age=days * 86400)
    if conf.PRUNE_FINISHED_AFTER_DAYS > 0:
        prune_finished(older_than=timedelta(days=conf.PRUNE_FINISHED_AFTER_DAYS))
    dead = (
        DjangoJob.objects.filter(id__startswith=JOB_PREFIX)
        .exclude(id__startswith=job_prefix(worker_id))
        .filter(next_run_time__lt=timezone.now() - DEAD_CONSUMER_AFTER)
    )
    deleted, _ = dead.delete()
    logger.info("study_prune executions_days=%s dead_consumer_rows=%s", days, deleted)


@close_old_connections
def close_idle_job(worker_id: str = "") -> None:
    """Every minute: record the sessions of the xAPI registrations that went idle."""
    xapi.close_idle(timezone.now())


class ScheduledConsumer:
    """A ``Consumer`` whose cycles a scheduler runs every ``interval`` s, or sooner when due."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer, worker_id = consumer, consumer.worker_id
        self.interval = consumer.interval
        self.prefix = job_prefix(worker_id)
        self.consume_job_id = f"{self.prefix}consume"
        self._lock = threading.Lock()
        self._cycle_ended = threading.Condition(self._lock)
        self._cycle_running = False
        self._wake_pending = False
        self.scheduler = scheduler = BackgroundScheduler(
            timezone=settings.TIME_ZONE,
            # One worker thread, one instance per job (APScheduler's default): no overlap.
            executors={"default": ThreadPoolExecutor(max_workers=1)},
        )
        scheduler.add_jobstore(ConsumerJobStore(self.prefix), "default")
        scheduler.add_job(
            consume_job,
            trigger="interval",
            seconds=self.interval,
            kwargs={"worker_id": worker_id},
            id=self.consume_job_id,
            name=f"studyqueue consume ({worker_id})",
            next_run_time=timezone.now(),
            misfire_grace_time=max(1, int(self.interval)),
            replace_existing=True,
        )
        scheduler.add_job(
            prune_job,
            trigger="cron",
            day_of_week="mon",
            hour=3,
            kwargs={"worker_id": worker_id},
            id=f"{self.prefix}prune",
            name=f"studyqueue prune ({worker_id})",
            replace_existing=True,
        )
        scheduler.add_job(
            close_idle_job,
            trigger="interval",
            minutes=1,
            id=f"{self.prefix}xapi",
            name=f"studyqueue idle xAPI sessions ({worker_id})",
            replace_existing=True,
        )
        scheduler.add_listener(self.after_cycle, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)

    def run(self, announce: Callable[[str], object] = print) -> None:
        """Run until the consumer is asked to stop (``Consumer.request_stop()``, e.g. from a
        signal handler, even before this starts); then let the running cycle end."""
        consumer, worker_id = self.consumer, self.consumer.worker_id
        llm_url = endpoints.shown_urls()
        # A ready job wakes an idle consumer at once (LISTEN on PostgreSQL, ``on_message``) or
        # within a second (the poll thread); the interval stays the fallback for a lost notice.
        listening = notify.start_listener(
            consumer.store.alias, self.on_message, stopping=consumer.stopping, wait=consumer.wait
        )
        if not listening:
            poll.start_poller(consumer.store.alias, self.wake, idle=self.idle, wait=consumer.wait)
        _running[worker_id] = self
        try:
            self.scheduler.start()
            logger.info(
                "study_consumer_started worker=%s interval_s=%s gate_permits=%s llm_url=%s "
                "db_sessions=%s",
                worker_id,
                self.interval,
                conf.GATE_PERMITS,
                llm_url,
                pg.mode(consumer.store.alias),  # straight, direct URL, or pooled
            )
            announce(
                gettext("Consumer %(worker)s running every %(interval)ss against %(url)s.")
                % {"worker": worker_id, "interval": f"{self.interval:g}", "url": llm_url}
            )
            consumer.wait_for_stop()
            # The running cycle ends first: shutdown(wait=True) waits for it while holding
            # the job store lock, which a starting cycle needs to park its trigger
            # (modify_job): a deadlock. A cycle starting now sees the stop and parks nothing.
            with self._cycle_ended:
                self._cycle_ended.wait_for(lambda: not self._cycle_running)
            self.scheduler.shutdown(wait=True)
        finally:
            _running.pop(worker_id, None)
        logger.info("study_consumer_stopped worker=%s", worker_id)

    def cycle(self) -> CycleResult:
        """Run one consume cycle (the scheduled job's body)."""
        with self._lock:
            self._cycle_running = True
        # Park the interval trigger while the cycle runs: a cycle may outlast the interval, and
        # a tick then would only record "max instances". after_cycle() sets the next run.
        self._run_at(PARKED_SECONDS)
        return self.consumer.run_cycle()

    def wake(self) -> None:
        """Run the next cycle now, or right after the running one; not while the breaker
        pauses claiming (the next cycle is already set for the pause's end)."""
        with self._lock:
            if self._cycle_running:
                self._wake_pending = True
                return
        if self.consumer.pool.allows():
            self._run_at(0.0)

    def _run_at(self, delay: float) -> None:
        if self.consumer.stopping():
            return
        try:
            self.scheduler.modify_job(
                self.consume_job_id, next_run_time=timezone.now() + timedelta(seconds=delay)
            )
        except Exception:  # the scheduler is shutting down
            logger.debug("study_scheduler_reschedule_failed", exc_info=True)

    def after_cycle(self, event: JobExecutionEvent) -> None:
        """Scheduler listener: the next cycle runs after ``interval``, or sooner when work
        is due sooner (a backlog, a retry coming up, a wake-up during the cycle)."""
        if event.job_id != self.consume_job_id:
            return
        with self._lock:
            self._cycle_running = False
            self._cycle_ended.notify_all()
            woken, self._wake_pending = self._wake_pending, False
        delay = 0.0 if woken else self.interval
        if event.exception is not None:
            # A failed cycle (typically the database went away) is retried soon; the next
            # run starts with fresh, health-checked connections.
            delay = min(delay, ERROR_RETRY_SECONDS)
        if isinstance(event.retval, CycleResult) and event.retval.next_due_in is not None:
            delay = min(delay, event.retval.next_due_in)
        # While the breaker pauses claiming, an earlier cycle would claim nothing; a pause
        # longer than the interval still lets a cycle report every interval.
        pause = self.consumer.pause_before_next_cycle()
        delay = max(delay, min(pause, self.interval))
        self._run_at(delay)

    def on_message(self, message: notify.Message) -> None:
        """Act on a notice from the LISTEN thread (thread-safe)."""
        if message.kind is notify.Kind.WAKE:
            self.wake()
        elif message.kind is notify.Kind.CANCEL and message.job_id is not None:
            self.consumer.cancel_job(message.job_id)
        elif message.kind is notify.Kind.PAUSE:
            self.consumer.hand_back_paused_soon(message.job_kind)

    def idle(self) -> bool:
        """No cycle is running (thread-safe)."""
        with self._lock:
            return not self._cycle_running
