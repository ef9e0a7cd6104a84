"""One consume cycle: reset stale jobs, then claim and run jobs until the budget is spent.

Order and guarantees kept from the original service: stale recovery first, claims in id
order, dispatch by kind, each job isolated (its exception never touches another job; an
unexpected error fails it as ``internal``, a crash leaves it to stale recovery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from django.db import DatabaseError
from django.db.models import F
from django.utils import timezone

from studyqueue import queue
from studyqueue.breaker import CircuitBreaker
from studyqueue.conf import conf
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob
from studyqueue.services.llm import LLMClient
from studyqueue.workers.explanation import WorkContext, record_failure, run_explanation_job

logger = logging.getLogger("studyqueue.consumer")

Handler = Callable[[StudyQuestionJob, WorkContext], Awaitable[str]]

# Kind -> handler. A kind listed in RESERVED is known but not built yet: its jobs are
# skipped at once rather than left in the queue.
HANDLERS: dict[str, Handler] = {JobKind.EXPLANATION: run_explanation_job}
RESERVED: dict[str, str] = {
    JobKind.SESSION_SUMMARY: "session_summary is reserved and not implemented yet",
}

# One breaker per process: it outlives cycles so that a pause spans them.
BREAKER = CircuitBreaker()


def default_worker_id() -> str:
    """``host:pid``: unique per consumer process."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class CycleResult:
    """What one cycle did."""

    claimed: int = 0
    outcomes: Counter = field(default_factory=Counter)
    stale_reset: int = 0
    stale_failed: int = 0
    paused_for: float = 0.0  # the breaker is open: claiming resumes after this many seconds
    next_due_in: float | None = None  # seconds until a pending job is due (0: ready now)

    @property
    def more_ready(self) -> bool:
        return self.next_due_in == 0.0

    def summary(self) -> str:
        parts = " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"claimed={self.claimed} {parts} stale_reset={self.stale_reset} "
            f"stale_failed={self.stale_failed} paused_s={self.paused_for:.1f} "
            f"next_due_s={'-' if self.next_due_in is None else f'{self.next_due_in:.1f}'}"
        ).replace("  ", " ")


async def dispatch(job: StudyQuestionJob, ctx: WorkContext) -> str:
    """Run a claimed job by its kind."""
    handler = HANDLERS.get(job.kind)
    if handler is not None:
        return await handler(job, ctx)
    if job.kind in RESERVED:
        applied = await queue.askip_claimed(job, ErrorCode.UNSUPPORTED_KIND, RESERVED[job.kind])
    else:
        applied = await queue.askip_claimed(
            job, ErrorCode.UNKNOWN_KIND, f"unknown kind {job.kind!r}"
        )
    return "skipped" if applied else "lost"


async def _heartbeat(job: StudyQuestionJob, runner: asyncio.Task, interval: float) -> None:
    """Beat now, then every ``interval`` seconds, until cancelled or the claim is lost."""
    while True:
        try:
            alive = await queue.aheartbeat(job)
        except DatabaseError as exc:
            # The database is away: keep trying; if it stays away past the stale
            # threshold, stale recovery gives the job to someone else (fenced).
            logger.warning("study_heartbeat_failed id=%s error=%s", job.pk, type(exc).__name__)
            alive = True
        if not alive:
            # The claim was taken from us (stale reset, operator skip): stop the call
            # so the LLM server stops generating for nobody.
            runner.cancel("claim lost")
            return
        await asyncio.sleep(interval)


class _Heartbeats:
    """Heartbeats for one running job, started only once it outlives the first interval:
    most jobs of a busy queue finish sooner, and a timer costs less than a task."""

    def __init__(self, job: StudyQuestionJob, runner: asyncio.Task, interval: float) -> None:
        self._task: asyncio.Task | None = None
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(interval, self._start, job, runner, interval)

    def _start(self, job: StudyQuestionJob, runner: asyncio.Task, interval: float) -> None:
        self._task = asyncio.get_running_loop().create_task(_heartbeat(job, runner, interval))

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


async def run_job(job: StudyQuestionJob, ctx: WorkContext) -> str:
    """Run one job in isolation, with heartbeats; never raises except on cancellation.

    If even recording the outcome fails (the database is away), the job is left
    ``processing``: stale recovery hands it to another attempt, and fencing keeps
    this worker's late writes out.
    """
    runner = asyncio.current_task()
    assert runner is not None
    beats = _Heartbeats(job, runner, conf.HEARTBEAT_SECONDS)
    try:
        return await dispatch(job, ctx)
    except asyncio.CancelledError:
        # Shutdown past its grace period, or the claim was lost: hand the job back
        # (refused, and harmless, if it is no longer ours).
        with contextlib.suppress(DatabaseError):
            await asyncio.shield(
                queue.arelease(job, delay=0, message="consumer stopped before the job finished")
            )
        raise
    except Exception as exc:
        logger.exception("study_job_crashed id=%s kind=%s", job.pk, job.kind)
        try:
            return await record_failure(job, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        except DatabaseError:
            return "lost"
    finally:
        beats.stop()


async def consume_study_queue(
    *,
    worker_id: str | None = None,
    batch_size: int | None = None,
    budget: float | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    breaker: CircuitBreaker | None = None,
) -> CycleResult:
    """One cycle: reset stale jobs, then keep up to 2 x GATE_PERMITS jobs in flight (at most
    GATE_PERMITS calling the LLM) while jobs are ready and the budget
    (``CYCLE_BUDGET_SECONDS``) lasts."""
    worker_id = worker_id or default_worker_id()
    batch_size = batch_size or conf.BATCH_SIZE
    budget = conf.CYCLE_BUDGET_SECONDS if budget is None else budget
    breaker = breaker or BREAKER
    permits = conf.GATE_PERMITS
    # One job ready behind each gate slot: while a call runs, the next job is claimed,
    # loaded and waiting, and the gate hands it the slot the moment the call ends.
    # A larger BATCH_SIZE claims more at once (fewer commits per job); the extra jobs
    # wait for the gate with their heartbeats running.
    in_flight = max(2 * permits, batch_size)
    grace = conf.SHUTDOWN_GRACE_SECONDS
    result = CycleResult()

    stale = await queue.areset_stale()
    result.stale_reset, result.stale_failed = stale.reset, stale.failed

    deadline = time.monotonic() + budget
    stop_seen_at: float | None = None
    running: set[asyncio.Task[str]] = set()
    # Claims in progress, with their limits. A claim runs as a task beside the jobs, so
    # its database work queues up behind theirs: the database thread goes from one
    # job's write to the next claim without waiting for this loop to come round.
    claims: dict[asyncio.Task[list[StudyQuestionJob]], int] = {}
    claims_started = 0
    nothing_ready = False  # a claim came back short: claim again once a job ends
    # Tasks report here when done: one callback per task, where asyncio.wait would add
    # and remove one on every task in flight at every wake-up.
    finished: asyncio.Queue[asyncio.Task] = asyncio.Queue()

    def track(task: asyncio.Task) -> asyncio.Task:
        task.add_done_callback(finished.put_nowait)
        return task

    db_error: DatabaseError | None = None
    async with LLMClient.from_settings() as client:
        ctx = WorkContext(client, breaker, permits, conf.GATE_TIMEOUT_SECONDS, should_stop)
        while True:
            if should_stop() and stop_seen_at is None:
                stop_seen_at = time.monotonic()
            # The budget bounds further claims; every cycle claims at least once.
            in_budget = claims_started == 0 or time.monotonic() < deadline
            claiming = (
                stop_seen_at is None
                and in_budget
                and not nothing_ready
                and db_error is None
                and breaker.allows()
            )
            free = in_flight - len(running) - sum(claims.values())
            if claiming and free > 0:
                limit = min(batch_size, free)
                claims[
                    track(asyncio.create_task(queue.aclaim(worker_id=worker_id, limit=limit)))
                ] = limit
                claims_started += 1
                continue
            if not running and not claims:
                break  # nothing ready (or no more claiming), nothing running
            if stop_seen_at is None:
                timeout = 0.5  # wake up to notice a stop request
            else:
                timeout = max(0.0, stop_seen_at + grace - time.monotonic())
            for task in await _finished_tasks(finished, timeout):
                if task in claims:
                    limit = claims.pop(task)
                    try:
                        jobs = task.result()
                    except DatabaseError as exc:
                        # Let the running jobs finish, then fail the cycle so that it is
                        # retried soon on a fresh connection.
                        db_error = exc
                        continue
                    result.claimed += len(jobs)
                    nothing_ready = nothing_ready or len(jobs) < limit
                    if stop_seen_at is not None:
                        # Claimed as the stop came: start nothing new.
                        result.outcomes["released"] += await _release(jobs)
                        continue
                    for job in jobs:
                        running.add(
                            track(asyncio.create_task(run_job(job, ctx), name=f"job-{job.pk}"))
                        )
                elif task in running:
                    running.discard(task)
                    nothing_ready = False
                    # A task cancelled by its heartbeat lost its claim; it wrote nothing.
                    result.outcomes["lost" if task.cancelled() else task.result()] += 1
            if stop_seen_at is not None and time.monotonic() >= stop_seen_at + grace:
                if running:
                    logger.warning("study_consumer_grace_expired releasing=%s", len(running))
                    for task in running:
                        task.cancel()
                    await asyncio.gather(*running, return_exceptions=True)
                    result.outcomes["released"] += len(running)
                    running = set()
                for claimed in await asyncio.gather(*claims, return_exceptions=True):
                    if isinstance(claimed, list):
                        result.outcomes["released"] += await _release(claimed)
                claims = {}
    if db_error is not None:
        logger.warning("study_consumer_db_error worker=%s error=%r", worker_id, db_error)
        raise db_error
    result.paused_for = breaker.remaining()
    result.next_due_in = await _next_due_in()
    logger.info("study_consumer_cycle worker=%s %s", worker_id, result.summary())
    return result


async def _finished_tasks(finished: asyncio.Queue[asyncio.Task], timeout: float) -> list:
    """The tasks that have finished: at least one, unless ``timeout`` passes first."""
    try:
        async with asyncio.timeout(timeout):
            first = await finished.get()
    except TimeoutError:
        return []
    done = [first]
    while not finished.empty():
        done.append(finished.get_nowait())
    return done


async def _release(jobs: list[StudyQuestionJob]) -> int:
    """Hand claimed jobs that will not be started back (attempt kept); how many."""
    released = 0
    for job in jobs:
        with contextlib.suppress(DatabaseError):  # else stale recovery gets them
            released += await queue.arelease(job, delay=0, message="consumer stopping")
    return released


async def _next_due_in() -> float | None:
    """Seconds until the earliest claimable pending job is due; None if there is none."""
    run_after = await (
        StudyQuestionJob.objects.pending()
        .filter(attempts__lt=F("max_attempts"))
        .order_by("run_after")
        .values_list("run_after", flat=True)
        .afirst()
    )
    if run_after is None:
        return None
    return max(0.0, (run_after - timezone.now()).total_seconds())
