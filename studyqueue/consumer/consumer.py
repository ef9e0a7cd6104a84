"""The consumer: one long-lived object per process that turns pending jobs into results. It
owns its event loop, its job store (``queue.store``) and its endpoint pool (``services.pool``)
(docs/architecture.md says which work goes where, and why); ``consumer.scheduler`` runs its
cycles (``Cycle``). A job's exception never touches another job: an unexpected error fails it
as ``internal``, and a crash leaves it to stale recovery.

The last look before an LLM call, in the gap where the server idles, reads the pauses this
consumer knows of (``KnownPauses``), not the database (a read there cost 2.7-4.8 ms of a 10 ms
gap): fed by a pause's ``NOTIFY`` (PostgreSQL) and the cycle's read while claimed jobs wait
(``Cycle.check_pauses``). A kind it names is confirmed in the database before a job is held
back (a resume sends no notice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from studyqueue.conf import conf
from studyqueue.explanations.prompts import current_version
from studyqueue.models import ErrorCode, StudyQuestionJob, delivery_kinds
from studyqueue.queue import presence, retry, transitions
from studyqueue.queue.pauses import apaused_kinds
from studyqueue.queue.store import Failed, JobStore
from studyqueue.queue.transitions import Outcome
from studyqueue.services import endpoints
from studyqueue.services.gate import LLMGate
from studyqueue.services.gate_control import GateController
from studyqueue.services.llm import LLMClient
from studyqueue.services.pool import EndpointPool
from studyqueue.sets import notices
from studyqueue.workers import registry

logger = logging.getLogger("studyqueue.consumer")

# A set may become done without a job of this consumer ending (another's did, or a crash
# came between the last job and its set's notice): look this often all the same.
NOTICE_SWEEP_SECONDS = 30.0
# What ends a job: a set whose last job ended may be done.
_ENDINGS = frozenset({Outcome.COMPLETED, Outcome.FAILED, Outcome.SKIPPED})
# Deliveries (``KindSpec.delivery``: notices, no LLM call) run beside the places kept for
# LLM jobs, never in them: a receiver dripping its answer for WEBHOOK_TIMEOUT_SECONDS holds up no
# explanation. A cycle claims them while fewer than this many run (a claim brings a batch at most).
DELIVERY_PLACES = 2
# How often the main thread, waiting to be stopped, looks for a signal's pending handler.
_SIGNAL_CHECK_SECONDS = 0.2


def default_worker_id() -> str:
    """``host:pid``: unique per consumer process."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class CycleResult:
    """What one cycle did."""

    claimed: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    stale_reset: int = 0
    stale_failed: int = 0
    paused_for: float = 0.0  # the breaker is open: claiming resumes after this many seconds
    next_due_in: float | None = None  # seconds until a pending job is due (0: ready now)

    @property
    def more_ready(self) -> bool:
        return self.next_due_in == 0.0

    def summary(self) -> str:
        """The cycle as ``key=value`` pairs."""
        fields = {
            "claimed": self.claimed,
            **{str(k): v for k, v in sorted(self.outcomes.items())},
            "stale_reset": self.stale_reset,
            "stale_failed": self.stale_failed,
            "paused_s": f"{self.paused_for:.1f}",
            "next_due_s": "-" if self.next_due_in is None else f"{self.next_due_in:.1f}",
        }
        return " ".join(f"{k}={v}" for k, v in fields.items())


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
        if not is_paused(kind, self.kinds):  # else it may be: confirmed in the database
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


class Unstarted:
    """The jobs a cycle claimed whose LLM call has not started (loading, waiting at a gate):
    a pause of their kind hands them back at once, and the last look before the call
    (``starting``, inside the gate) decides with the pauses this consumer knows of."""

    def __init__(self, pauses: KnownPauses, read: Callable[[], Awaitable[list[str]]]) -> None:
        self.pauses = pauses
        self._read = read  # the pauses from the database, when the known ones name a kind
        self.jobs: dict[int, StudyQuestionJob] = {}
        self.handed_back: dict[int, str] = {}  # cancelled to be handed back: why

    def paused(self, paused: list[str]) -> list[StudyQuestionJob]:
        """Take out the jobs whose kind is ``paused``, each with why it is handed back."""
        waiting = [job for job in self.jobs.values() if is_paused(job.kind, paused)]
        for job in waiting:
            del self.jobs[job.pk]
            self.handed_back[job.pk] = paused_message(job.kind, paused)
        return waiting

    async def starting(self, job: StudyQuestionJob) -> str | None:
        """``WorkContext.starting``: why a cycle's job is held back just before its call, or
        None (``run_one`` runs its job whatever the pauses: it is not in ``jobs``)."""
        if self.jobs.pop(job.pk, None) is None:
            return None
        return await self.pauses.last_look(job.kind, self._read)


class Consumer:
    """Claims and runs jobs, one ``run_cycle()`` at a time; close it when done. Once
    ``should_stop`` (default: ``request_stop()`` was called) is true, no new job starts, running
    ones get ``SHUTDOWN_GRACE_SECONDS`` to finish, and jobs still running then are handed back
    without losing their attempt."""

    def __init__(
        self,
        *,
        worker_id: str | None = None,
        batch_size: int | None = None,
        budget: float | None = None,
        interval: float | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.worker_id = worker_id or default_worker_id()
        self.interval = interval or conf.INTERVAL_SECONDS
        self.batch_size = batch_size or conf.BATCH_SIZE
        self.budget = conf.CYCLE_BUDGET_SECONDS if budget is None else budget
        self._stop = threading.Event()
        self.stopping: Callable[[], bool] = should_stop or self._stop.is_set
        # Three connections (``queue.store``): a claim or a lease never waits on a job's write.
        self.store = JobStore()
        self._runner = asyncio.Runner()
        self.pool = EndpointPool.build(endpoints.configured(), functools.partial(_gate_for, self))
        self.notices_swept_at = -NOTICE_SWEEP_SECONDS  # the last sweep (``Cycle``)
        self.storing = 0  # jobs whose call is over, storing what it returned
        # Set as a job begins to store (a place is free) and as a job ends: the cycle wakes.
        self.wake = asyncio.Event()
        # Jobs a cycle claimed whose LLM call has not started: a pause hands them back.
        self.unstarted = Unstarted(KnownPauses(), self.store.paused_kinds)
        self.ctx = registry.WorkContext(
            self.store, self.pool, self.stopping, starting=self.unstarted.starting
        )
        self._jobs: dict[int, asyncio.Task[Outcome]] = {}  # running, by job id
        self._started = False  # reported its start (QueueConsumer)
        self._closed = False
        self._reported_at = 0.0
        self._wait_logged_for = 0.0  # the breaker pause whose wait was last logged

    def request_stop(self) -> None:
        """Stop claiming; running jobs finish within the grace period (thread-safe)."""
        self._stop.set()

    def wait_for_stop(self) -> None:
        """Block until ``request_stop()`` (from a signal handler or another thread)."""
        # In short waits, not one: a signal the kernel hands to another of this process's
        # threads (the scheduler's, the poller's) runs its Python handler only when the
        # main thread next runs Python code, and a wait without a timeout never does.
        while not self._stop.wait(_SIGNAL_CHECK_SECONDS):
            pass

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on ``request_stop()``; True if stopping."""
        return self._stop.wait(seconds) or self.stopping()

    def run_cycle(self) -> CycleResult:
        """Run one cycle on the consumer's event loop (blocking); see ``Cycle``."""
        return self._runner.run(self._cycle())

    async def _cycle(self) -> CycleResult:
        # Between cycles; health checks catch the rest before the next use.
        await self.store.close_old_connections()
        try:
            if not self._started:
                await self.pool.ask_servers()
                # The prompt version read on the claims' thread, as at each report (presence
                # takes it from the consumer: the queue imports nothing of the explanations).
                await self.store.on_claims(
                    lambda: presence.record_start(
                        self.worker_id,
                        interval=self.interval,
                        llm_url=endpoints.shown_urls(),
                        prompt=current_version(),
                        gate=str(conf.GATE_PERMITS),
                    )
                )
                self._started = True
            await self.pool.sync_gates(self.store.on_claims)
            await self.report()
            result = await Cycle(self).run()
            await self.report()
        finally:
            for member in self.pool.members:  # idle now: it waits for no slot
                await member.gate.idle()
            await self.store.close_old_connections()
        # Enough to tell a stuck consumer from an idle one: the breaker and the gate. A cycle
        # that only probed a server still down says nothing new (``OUTAGE_LOG_SECONDS``).
        probed = set(result.outcomes) <= {Outcome.RELEASED} and self.pool.failures > 1
        logger.log(
            logging.DEBUG if probed else logging.INFO,
            "study_consumer_cycle worker=%s %s breaker_failures=%s gate_free=%s/%s",
            self.worker_id,
            result.summary(),
            self.pool.failures,
            self.pool.free,  # each gate's limit less its calls: an auto gate's 8 slots say 8/1
            self.pool.limit,
        )
        return result

    def pause_before_next_cycle(self) -> float:
        """Seconds before a cycle could claim anything (the rest of the breaker's pause, 0 when
        closed): callers wait this long; the log says why, once per pause."""
        pool = self.pool
        remaining = pool.remaining()
        if remaining > 0 and pool.open_until != self._wait_logged_for:
            self._wait_logged_for = pool.open_until
            error = pool.last_error
            logger.log(
                logging.INFO if pool.failures <= 1 else logging.DEBUG,  # said at an outage's start
                "study_consumer_waiting worker=%s reason=llm_paused wait_s=%.1f "
                "error_code=%s breaker_failures=%s",
                self.worker_id,
                remaining,
                error.code if error else "-",
                pool.failures,
            )
        return remaining

    def run_one(self, job: StudyQuestionJob) -> Outcome:
        """Run one job this caller claimed now, as a cycle would (``manage.py explain``)."""

        async def go() -> Outcome:
            await self.store.close_old_connections()
            return await self.run_job(job)

        return self._runner.run(go())

    async def report(self, *, if_due: bool = False) -> None:
        """Write this consumer's record (``QueueConsumer``); with ``if_due``, only when half
        an interval has passed since the last (so a long cycle never looks silent)."""
        if if_due and time.monotonic() - self._reported_at < self.interval / 2:
            return
        pool, error = self.pool, self.pool.last_error
        report = presence.Report(
            breaker_open=not pool.allows(),
            breaker_since=pool.failing_since,
            breaker_error=error.code if error is not None else "",
            gate_limit=pool.limit,
            endpoints=pool.report(),
        )
        try:
            await self.store.on_claims(
                lambda: presence.record_report(self.worker_id, report, prompt=current_version())
            )
        except DatabaseError as exc:
            logger.warning("study_consumer_report_failed error=%s", type(exc).__name__)
            return
        self._reported_at = time.monotonic()

    def cancel_job(self, job_id: int) -> None:
        """Stop a running job's LLM call now, thread-safe (its claim was taken from us)."""
        task = self._jobs.get(job_id)
        if task is not None:
            self._runner.get_loop().call_soon_threadsafe(task.cancel)
            logger.info("study_job_cancel_requested id=%s", job_id)

    def hand_back_paused_soon(self, kind: str) -> None:
        """Note the pause of ``kind`` (a claim in flight may bring a job of it) and hand back its
        waiting jobs on the consumer's loop (thread-safe: the listener's pause notice)."""
        self.unstarted.pauses.noticed(kind)
        if not self.unstarted.jobs or self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: no job waits any more
            self._runner.get_loop().call_soon_threadsafe(self.hand_back_paused, [kind])

    def hand_back_paused(self, paused: list[str]) -> None:
        """Hand back (attempt kept) every job a cycle claimed whose kind is ``paused``
        (``paused_kinds()``) and whose LLM call has not started."""
        waiting = self.unstarted.paused(paused)
        for job in waiting:
            task = self._jobs.get(job.pk)
            if task is not None:
                task.cancel()  # run_job hands it back
        if waiting:
            logger.info(
                "study_consumer_paused_jobs_handed_back worker=%s ids=%s paused=%s",
                self.worker_id,
                ",".join(str(job.pk) for job in waiting),
                ",".join(kind or "all" for kind in paused),
            )

    async def run_claimed(self, job: StudyQuestionJob) -> Outcome:
        """Run a job a cycle claimed: until its LLM call starts, a pause hands it back."""
        self.unstarted.jobs[job.pk] = job
        try:
            return await self.run_job(job)
        finally:
            self.unstarted.jobs.pop(job.pk, None)

    async def run_job(self, job: StudyQuestionJob) -> Outcome:
        """Run one claimed job with heartbeats; returns its outcome, never raises."""
        runner = asyncio.current_task()
        assert runner is not None
        self._jobs[job.pk] = runner
        beats = asyncio.create_task(self._heartbeat(job, runner))
        try:
            result = await registry.dispatch(job, self.ctx)
            held_place = job.kind not in delivery_kinds()  # a delivery has no place to free
            self.storing += held_place
            self.wake.set()
            try:
                return await self.store.finish(job, result)
            finally:
                self.storing -= held_place
        except asyncio.CancelledError:
            # A pause came before the call started, the claim was lost (a refused
            # heartbeat) or the grace period ran out: hand the job back. Refused, and
            # harmless, if it is no longer ours.
            reason = self.unstarted.handed_back.pop(
                job.pk, "consumer stopped before the job finished"
            )
            return await self.release(job, reason)
        except Exception as exc:
            logger.exception("study_job_crashed id=%s kind=%s", job.pk, job.kind)
            try:
                failure = retry.Failure(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                return await self.store.finish(job, Failed.decided(job, failure))
            except DatabaseError:
                return Outcome.LOST  # left processing: stale recovery retries it
        finally:
            beats.cancel()
            self._jobs.pop(job.pk, None)
            self.unstarted.handed_back.pop(job.pk, None)

    async def _heartbeat(self, job: StudyQuestionJob, runner: asyncio.Task[Any]) -> None:
        """Every HEARTBEAT_SECONDS while the job runs; cancels it if the claim is lost."""
        while True:
            await asyncio.sleep(conf.HEARTBEAT_SECONDS)
            try:
                alive = await self.store.heartbeat(job)
            except DatabaseError as exc:
                # The database is away: keep trying; if it stays away past the stale
                # threshold, stale recovery gives the job to someone else (fenced).
                logger.warning("study_heartbeat_failed id=%s error=%s", job.pk, type(exc).__name__)
                continue
            if not alive:
                # Taken from us (stale reset, operator skip): stop the call, so that the
                # LLM server stops generating for nobody.
                runner.cancel()
                return

    async def release(self, job: StudyQuestionJob, message: str) -> Outcome:
        """Hand back a job this consumer will not finish, attempt kept."""
        try:
            return await asyncio.shield(self.store.release(job, message))
        except DatabaseError:
            return Outcome.LOST  # stale recovery gets it

    def close(self) -> None:
        """Record the stop; close the LLM clients, the database connections and the loop (once)."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            try:
                self._runner.run(self.store.on_claims(presence.record_stop, self.worker_id))
            except DatabaseError as exc:
                logger.warning("study_consumer_report_failed error=%s", type(exc).__name__)
        self._runner.run(self.pool.aclose())
        self._runner.run(sync_to_async(connections.close_all)())  # the async ORM's
        self.store.close()
        self._runner.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gate_for(consumer: Consumer, endpoint: endpoints.Endpoint, client: LLMClient) -> LLMGate:
    """The gate of one endpoint: fixed or adaptive as its settings say."""
    return LLMGate(
        client.redact(endpoint.url),  # names the gate in messages: no secrets
        permits=endpoint.slots,
        timeout=conf.GATE_TIMEOUT_SECONDS,
        run_db=consumer.store.on_gate,
        db=consumer.store.alias,
        controller=GateController(max_limit=endpoint.max_permits) if endpoint.auto else None,
        holder=consumer.worker_id,  # restarted under this id, it takes its leases back at once
    )


class Cycle:
    """One consume cycle's bookkeeping: the jobs in flight and what became of them."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.result = CycleResult()
        self.running: set[asyncio.Task[Outcome]] = set()
        self.ended: list[asyncio.Task[Outcome]] = []  # running tasks done since the last wake
        self.deliveries: set[asyncio.Task[Outcome]] = set()  # of ``running``: in no place
        self.deadline = time.monotonic() + consumer.budget
        self.claims = 0
        self.nothing_ready = False  # a claim came back short: claim again once a job ends
        self.db_error: DatabaseError | None = None
        self.stop_seen_at: float | None = None
        self.pauses_checked_at = time.monotonic()

    @property
    def in_flight(self) -> int:
        """Jobs kept in flight: one ready behind each gate slot the limit allows now (the gate
        hands it the slot as the call ends), or BATCH_SIZE if larger. A job storing its reply
        holds no place (``places``): the next claim need not wait for that write."""
        return max(2 * self.consumer.pool.limit, self.consumer.batch_size)

    @property
    def places(self) -> int:
        """Places in flight free now (``DELIVERY_PLACES``: a delivery takes none)."""
        # Deliveries are among the running: counted, not a new set at each look.
        return self.in_flight - (len(self.running) - len(self.deliveries)) + self.consumer.storing

    async def run(self) -> CycleResult:
        """Reset stale jobs, then claim jobs in id order and run them until nothing is ready or
        the budget (``CYCLE_BUDGET_SECONDS``; every cycle claims once) is spent."""
        consumer = self.consumer
        stale = await consumer.store.reset_stale()
        self.result.stale_reset, self.result.stale_failed = stale.reset, stale.failed
        while True:
            if self.stop_seen_at is None and consumer.stopping():
                self.stop_seen_at = time.monotonic()
            if self.may_claim() and self.places > 0:
                await self.claim_more()
                continue
            if not self.running:
                break
            # Woken by a job that ends or begins to store (``ended``), not by waiting on every
            # running task: that cost a tenth of a job's time per job at 10 in flight.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.wait_timeout()):
                    await consumer.wake.wait()
            consumer.wake.clear()
            done, self.ended = self.ended, []
            for task in self.running.intersection(done):  # not counted by ``grace_expired``
                self.job_finished(task)
            # A delivery may keep the cycle open for WEBHOOK_TIMEOUT_SECONDS: look for LLM work
            # meanwhile, at each wake (twice a second), as the next cycle would.
            self.nothing_ready = self.nothing_ready and not self.deliveries
            await consumer.pool.sync_gates(consumer.store.on_claims)
            await self.check_pauses()
            await consumer.report(if_due=True)
            if self.stop_seen_at is not None and self.wait_timeout() == 0:
                await self.grace_expired()
        if self.db_error is not None:
            # Running jobs have finished; the scheduler retries soon, on a fresh connection.
            logger.warning(
                "study_consumer_db_error worker=%s error=%r", consumer.worker_id, self.db_error
            )
            raise self.db_error
        await self.queue_notices()
        self.result.paused_for = consumer.pool.remaining()
        self.result.next_due_in = await consumer.store.on_claims(transitions.next_due_in)
        return self.result

    def may_claim(self) -> bool:
        in_budget = self.claims == 0 or time.monotonic() < self.deadline
        return (
            self.stop_seen_at is None
            and in_budget
            and not self.nothing_ready
            and self.db_error is None
            and self.consumer.pool.allows()
        )

    def wait_timeout(self) -> float:
        """How long to wait for a job to end: until a stop could be seen, or the grace is over."""
        if self.stop_seen_at is None:
            return 0.5
        return max(0.0, self.stop_seen_at + conf.SHUTDOWN_GRACE_SECONDS - time.monotonic())

    async def claim_more(self) -> None:
        """Claim up to the free places in flight and start what came back."""
        consumer = self.consumer
        limit = min(consumer.batch_size, self.places)
        self.claims += 1
        try:
            room = len(self.deliveries) < DELIVERY_PLACES
            # A server is down: this claim probes it, and the breaker's line says why.
            level = logging.DEBUG if consumer.pool.failures else logging.INFO
            jobs = await consumer.store.claim(
                consumer.worker_id, limit, deliveries=room, level=level
            )
        except DatabaseError as exc:
            self.db_error = exc  # claim no more; let the running jobs finish
            return
        self.result.claimed += len(jobs)
        self.nothing_ready = len(jobs) < limit
        for job in jobs:
            if consumer.stopping():
                # Claimed as the stop came: start nothing new.
                self.result.outcomes[await consumer.release(job, "consumer stopping")] += 1
                continue
            task = asyncio.create_task(consumer.run_claimed(job), name=f"job-{job.pk}")
            task.add_done_callback(self.task_ended)
            self.running.add(task)
            if job.kind in delivery_kinds():
                self.deliveries.add(task)

    async def queue_notices(self) -> None:
        """Queue the notice of each question set now done: after a cycle that finished jobs,
        else every ``NOTICE_SWEEP_SECONDS``; before the cycle reads what is due, so a drain sends
        the notice its last job made due."""
        consumer = self.consumer
        finished = sum(n for outcome, n in self.result.outcomes.items() if outcome in _ENDINGS)
        if not finished and time.monotonic() - consumer.notices_swept_at < NOTICE_SWEEP_SECONDS:
            return
        consumer.notices_swept_at = time.monotonic()
        try:
            await consumer.store.on_claims(notices.queue_due_notices)
        except DatabaseError as exc:
            logger.warning("study_set_notice_sweep_failed error=%s", type(exc).__name__)

    async def check_pauses(self) -> None:
        """While claimed jobs wait to start, look for a pause twice a second (SQLite, or a lost
        NOTIFY) and keep what it found for the jobs' last look (``Unstarted``)."""
        consumer = self.consumer
        pauses = consumer.unstarted.pauses
        if not consumer.unstarted.jobs or time.monotonic() - self.pauses_checked_at < 0.5:
            return
        self.pauses_checked_at = time.monotonic()
        started = pauses.reading()
        try:
            paused = await apaused_kinds()
        except DatabaseError as exc:
            self.db_error = exc  # as for a claim: claim no more, let running jobs finish
            return
        pauses.read(paused, started=started)
        if paused:
            consumer.hand_back_paused(paused)

    def task_ended(self, task: asyncio.Task[Outcome]) -> None:
        self.ended.append(task)
        self.consumer.wake.set()

    def job_finished(self, task: asyncio.Task[Outcome]) -> None:
        """Count a finished job; a place in flight is free, so claiming may go on."""
        self.running.discard(task)
        self.deliveries.discard(task)
        self.nothing_ready = False
        # A task cancelled before it ever ran wrote nothing: its job is left to stale recovery.
        outcome = Outcome.LOST if task.cancelled() else task.result()
        self.result.outcomes[outcome] += 1

    async def grace_expired(self) -> None:
        """Stop every job still running: each hands its job back (attempt kept)."""
        logger.warning("study_consumer_grace_expired releasing=%s", len(self.running))
        for task in self.running:
            task.cancel()
        await asyncio.wait(self.running)
        for task in list(self.running):
            self.job_finished(task)
