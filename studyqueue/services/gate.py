"""The gate that bounds concurrent calls to one LLM endpoint, and the circuit breaker beside it:
the gate bounds how many calls go at once; the breaker, whether any go.

A gate's ``permits`` numbered slots are row leases (``GateLease``) on the database's clock,
shared by every consumer of the endpoint; between two calls of one consumer a slot is handed
over (docs/architecture.md, "Why the gate lives in the database"). A giver goes on once
its taker has ``sent(slot)`` its request, or after ``HANDOVER_WAIT_SECONDS``: storing its reply
would compete with the taker's call start for the interpreter.

Warm-first: a caller that names its prompt's prefix is admitted alone while that prefix is
cold for this gate (first use, after ``WARM_IDLE_SECONDS`` without a call); the others wait until
its first token (``warmed``) or its end, and find the prefix in the server's prompt cache
instead of all prefilling it at once.

Adaptive (``GATE_PERMITS=auto``): a ``GateController`` sets the limit within ``max_limit``
numbered slots, told the calls in flight and each call's outcome (``record``, ``record_loss``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import ParamSpec, Protocol, TypeVar

from django.db import DatabaseError
from django.db.models import DateTimeField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now

from studyqueue.exceptions import StudyQueueError
from studyqueue.models import ErrorCode, GateLease, fit
from studyqueue.queue import retry
from studyqueue.services.endpoints import endpoint_name
from studyqueue.services.gate_control import Change, GateController
from studyqueue.services.llm import LLMError

breaker_logger = logging.getLogger("studyqueue.breaker")

# While a server stays down, its breaker says so again this often (its probes between, and
# what they claim and hand back, log at DEBUG): a terminal is not flooded with every probe.
OUTAGE_LOG_SECONDS = 60.0


class CircuitBreaker:
    """Tracks server-wide LLM failures and how long claiming should pause (each trip's pause:
    ``retry.RetryStrategy.breaker_pause``). Any success closes it.

    A call that started before the breaker's last opening (``LLMError.call_started``) saw the
    same outage as the call that opened it: its failure neither counts another trip (the
    pause would double once per call in flight) nor logs another line. An outage is logged
    at its first failure, when its error changes and every ``OUTAGE_LOG_SECONDS``; the
    failures between, at DEBUG.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.open_until = 0.0
        self.opened_at: float | None = None  # monotonic time of the last counted failure
        self.last_error: LLMError | None = None
        self.failing_since: datetime | None = None  # the first failure of this run of them
        self._logged: tuple[str, float] = ("", 0.0)  # the last logged failure: code, when

    def remaining(self) -> float:
        """Seconds until claiming may resume (0 when closed)."""
        return max(0.0, self.open_until - time.monotonic())

    def allows(self) -> bool:
        """Whether claiming may go on."""
        return self.remaining() == 0.0

    def trip(self, error: LLMError) -> float:
        """Record a server-wide failure; returns the pause in seconds (for the failure of
        a call already running at the last opening: what is left of that opening's)."""
        with self._lock:
            now = time.monotonic()
            started = error.call_started
            if self.opened_at is not None and started is not None and started < self.opened_at:
                return max(0.0, self.open_until - now)  # the same outage, already counted
            self.last_error = error
            self.failures += 1
            self.opened_at = now
            if self.failing_since is None:
                self.failing_since = datetime.now(UTC)
            # Not reached and unavailable: the connection was refused (nothing listens).
            refused = error.code == ErrorCode.LLM_UNAVAILABLE and not error.reached_server
            pause = retry.strategy().breaker_pause(
                self.failures, error.retry_after, refused=refused
            )
            self.open_until = max(self.open_until, now + pause)
            code, logged_at = self._logged
            news = code != error.code or now - logged_at >= OUTAGE_LOG_SECONDS
            if news:
                self._logged = (error.code, now)
        # A rejection that hits every job is a configuration error: say so loudly.
        level = logging.ERROR if error.code == ErrorCode.LLM_REJECTED else logging.WARNING
        breaker_logger.log(
            level if news else logging.DEBUG,
            "study_llm_paused error_code=%s failures=%s pause_s=%.1f down_s=%.0f detail=%r",
            error.code,
            self.failures,
            pause,
            (datetime.now(UTC) - self.failing_since).total_seconds(),
            error.message[:200],
        )
        return pause

    def success(self) -> None:
        """A call went through: the server is back; close the breaker."""
        with self._lock:
            was_open, self.failures, self.open_until = self.failures, 0, 0.0
            self.failing_since = self.opened_at = None
            self._logged = ("", 0.0)
        if was_open:
            breaker_logger.info("study_llm_resumed after_failures=%s", was_open)


logger = logging.getLogger("studyqueue.gate")

# After this long without a call on a prefix, the next call warms it alone again: the server's
# prompt cache is an LRU, which other work has likely pushed our prefix out of after a minute
# of silence, and re-warming too soon costs only one call's time to first token.
WARM_IDLE_SECONDS = 60.0

# The most a caller that handed its slot over waits for the taker's request to go out: a
# request is written in milliseconds; a slow connect only delays the giver's storing.
HANDOVER_WAIT_SECONDS = 0.5

P = ParamSpec("P")
T = TypeVar("T")


class RunDB(Protocol):
    """``await run_db(fn, *args, **kwargs)``: the sync (ORM) ``fn`` on the gate's connection."""

    def __call__(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[T]: ...


class GateTimeout(StudyQueueError):
    """No gate slot became free within the timeout."""


class _Warmth:
    """One prefix's state: ``ready`` once a call's first token came (or the call ended)."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.active = 0  # calls on this prefix inside ``slot()`` (waiting or holding)
        self.last_seen = time.monotonic()


# A lease lasts this long on the database's clock unless its holder renews it, which it does
# every ``RENEW_SECONDS`` while it holds a slot: a consumer that died frees its slots within
# ``LEASE_SECONDS``; one that is alive misses two renewals before it could lose one.
LEASE_SECONDS = 15.0
RENEW_SECONDS = 5.0
# A consumer refused a slot says it waits in the endpoint's row of this number (no gate has so
# many slots); a holder that sees it at its renewal gives a slot back and takes none from the
# database for ``YIELD_SECONDS``, twice the waiter's longest pause between two looks.
WAITING_SLOT = 32767
YIELD_SECONDS = 0.5


def _lease_end(seconds: float) -> ExpressionWrapper:
    """The database's now plus ``seconds``: hosts whose clocks disagree agree on a lease's end."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


class SlotLeases:
    """A gate's slots as row leases (``GateLease``) in database ``db``, the same on SQLite,
    PostgreSQL and PostgreSQL behind a transaction pooler: every operation is one statement,
    so no session outlives it. Run on the gate's thread (``RunDB``)."""

    def __init__(self, db: str, seconds: float = LEASE_SECONDS) -> None:
        self.db, self.seconds = db, seconds
        self._end = _lease_end(seconds)
        # Each slot's filtered querysets, built once: building a filter costs more than the
        # statement itself, and both run between two calls, while the server idles. A slot
        # found here has its row.
        self._takes: dict[tuple[str, int, str], QuerySet[GateLease]] = {}
        self._gives: dict[tuple[str, int, str], QuerySet[GateLease]] = {}

    def _row(self, endpoint: str, slot: int) -> None:
        GateLease.objects.using(self.db).bulk_create(
            [GateLease(endpoint=endpoint, slot=slot)], ignore_conflicts=True
        )

    def _leases(self, endpoint: str) -> QuerySet[GateLease]:
        return GateLease.objects.using(self.db).filter(endpoint=endpoint)

    def take(self, endpoint: str, slot: int, holder: str) -> bool:
        """Take ``slot`` if it is free, its lease ended or ``holder`` holds it still: one
        update, which a concurrent taker's cannot also match (PostgreSQL re-checks the
        condition on the row it locked; SQLite runs one writer at a time)."""
        lease = self._takes.get((endpoint, slot, holder))
        if lease is None:
            self._row(endpoint, slot)
            # The database's now, each time.
            free = Q(holder__in=["", holder]) | Q(expires_at__lt=Now())
            lease = self._leases(endpoint).filter(free, slot=slot)
            self._takes[endpoint, slot, holder] = lease
        return lease.update(holder=holder, expires_at=self._end) == 1

    def give_back(self, endpoint: str, slot: int, holder: str) -> None:
        """Free ``slot`` if ``holder`` still holds it."""
        lease = self._gives.get((endpoint, slot, holder))
        if lease is None:
            lease = self._leases(endpoint).filter(slot=slot, holder=holder)
            self._gives[endpoint, slot, holder] = lease
        lease.update(holder="", expires_at=None)

    def want(self, endpoint: str, holder: str) -> None:
        """Say that ``holder`` waits for a slot (for two renewals, unless said again)."""
        self._row(endpoint, WAITING_SLOT)
        row = self._leases(endpoint).filter(slot=WAITING_SLOT)
        row.update(holder=holder, expires_at=_lease_end(2 * RENEW_SECONDS))

    def wanted(self, endpoint: str, holder: str) -> bool:
        """Whether a consumer other than ``holder`` waits for a slot."""
        waiting = self._leases(endpoint).filter(slot=WAITING_SLOT, expires_at__gt=Now())
        return waiting.exclude(holder__in=["", holder]).exists()

    def renew(self, endpoint: str, slots: list[int], holder: str) -> list[int]:
        """Extend ``holder``'s leases on ``slots``; those still its own."""
        held = self._leases(endpoint).filter(slot__in=slots, holder=holder)
        held.update(expires_at=self._end)
        return list(held.values_list("slot", flat=True))

    def give_back_all(self, endpoint: str, holder: str) -> int:
        """Free every slot ``holder`` holds: a restarted consumer's last run's, at once."""
        return self._leases(endpoint).filter(holder=holder).update(holder="", expires_at=None)


class LLMGate:
    """``permits`` slots for one endpoint, shared by every caller of this object and, as
    row leases in database ``db`` (``SlotLeases``), by every consumer of the endpoint.
    ``run_db`` runs a sync function on the consumer's gate connection; ``holder`` names the
    leases (the consumer's worker id: restarted, it frees its previous run's at once)."""

    def __init__(
        self,
        endpoint: str,
        *,
        run_db: RunDB,
        permits: int = 1,
        timeout: float = 600.0,
        db: str = "default",
        controller: GateController | None = None,
        holder: str = "",
    ) -> None:
        if controller is not None:
            permits = controller.max_limit
        if permits < 1:
            raise ValueError("a gate needs at least one permit")
        self.endpoint = endpoint_name(endpoint)
        self.permits = permits  # slots numbered 0 .. permits - 1
        self.controller = controller
        self.synced_limit: int | None = None  # the limit last agreed with the database
        self.last_reason = ""
        self.timeout = timeout
        self._run_db = run_db
        self._free = list(range(permits))  # slots nobody in this process holds
        # A waiter is handed a slot, or None: look again (the limit rose).
        self._waiters: deque[asyncio.Future[int | None]] = deque()
        self._warmth: dict[str, _Warmth] = {}
        self._handed: dict[int, asyncio.Event] = {}  # slot -> set once its taker sent
        self.leases = SlotLeases(db)
        anonymous = f"{socket.gethostname()}:{os.getpid()}:gate-{id(self)}"
        self.holder = fit(GateLease, "holder", holder) if holder else anonymous
        # A named holder may have a previous run's leases to free first; an anonymous one,
        # unique among processes, is new.
        self._adopted = not holder
        # Slots whose lease this gate holds: taken, not yet given back (a slot only being
        # taken or given back is not renewed, nor missed), each with until when (monotonic)
        # it is trusted without asking the database: its lease's end less one renewal,
        # reckoned from before the statement that took or renewed it (the database's now is
        # later).
        self._leased: dict[int, float] = {}
        self._renewing: asyncio.Task[None] | None = None
        self._yielding = False  # another consumer waits: give the next slot back to it
        self._yield_until = 0.0  # until then, take no slot from the database
        self._wanted_at: float | None = None  # when this gate last said it waits
        self._refused = False  # the database refused the last slot asked for

    @property
    def free_slots(self) -> int:
        """Slots no caller of this gate holds (another process may hold them)."""
        return len(self._free)

    @property
    def limit(self) -> int:
        """Slots callers may take now: ``permits``, or ``GateController.allowed``."""
        return self.permits if self.controller is None else self.controller.allowed

    @property
    def shared_limit(self) -> int:
        """The endpoint's limit as every consumer shares it (``GateLimit``): maybe above ours."""
        return self.permits if self.controller is None else self.controller.limit

    @property
    def held(self) -> int:
        """Slots callers of this gate hold (or are locking)."""
        return self.permits - len(self._free)

    def record(self, *, tokens: int | None, seconds: float) -> None:
        """A call through the gate ended with ``tokens`` completion tokens (adaptive)."""
        if self.controller is not None:
            self._changed(self.controller.sample(tokens=tokens, seconds=seconds))

    def record_loss(self, code: str) -> None:
        """A call through the gate ended in a loss signal ``code`` (adaptive)."""
        if self.controller is not None:
            self._changed(self.controller.loss(), detail=f" error_code={code}")

    def server_full(self) -> None:
        """The server says requests wait for it: the climb stops (adaptive)."""
        if self.controller is not None:
            self._changed(self.controller.server_full(), detail=" server=full")

    def adopt(self, limit: int) -> None:
        """Use ``limit``, the endpoint's limit another consumer set (adaptive)."""
        if self.controller is not None:
            self._changed(self.controller.adopt(limit))
        self.synced_limit = limit

    def restore(self, limit: int, rates: Mapping[int, float]) -> None:
        """Start from the endpoint's stored limit and measures (adaptive)."""
        if self.controller is not None:
            self._changed(self.controller.restore(limit, rates))
        self.synced_limit = limit

    def _changed(self, change: Change | None, detail: str = "") -> None:
        if change is None:
            return
        self.last_reason = change.reason
        rate = "-" if change.rate is None else f"{change.rate:.1f}"
        logger.info(
            "study_gate_limit endpoint=%s old=%s new=%s reason=%s tokens_per_s=%s%s",
            self.endpoint,
            change.old,
            change.new,
            change.reason,
            rate,
            detail,
        )
        if change.new > change.old:
            # More may be taken now: every waiter looks for a slot again.
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)

    def _in_flight(self) -> None:
        if self.controller is not None:
            self.controller.in_flight(self.held)

    @contextlib.asynccontextmanager
    async def slot(self, prefix: str | None = None) -> AsyncIterator[int]:
        """Hold one slot for the ``async with``; ``prefix`` names the call's prompt (warm-first)."""
        warm = None if prefix is None or self.permits == 1 else self._warm_first(prefix)
        async with warm or contextlib.nullcontext():
            slot = await self.acquire()
            try:
                yield slot
            finally:
                await self._give_back(slot)

    @contextlib.asynccontextmanager
    async def _warm_first(self, prefix: str) -> AsyncIterator[None]:
        """Lead while ``prefix`` is cold, else wait for the leader's first token (or end)."""
        warmth = self._warmth.get(prefix)
        now = time.monotonic()
        leader = warmth is None or (
            warmth.active == 0 and now - warmth.last_seen > WARM_IDLE_SECONDS
        )
        if warmth is None or leader:
            warmth = self._warmth[prefix] = _Warmth()
            logger.info("study_gate_warming endpoint=%s prefix=%s", self.endpoint, prefix)
        warmth.active += 1
        try:
            if not leader and not warmth.ready.is_set():
                try:
                    async with asyncio.timeout(self.timeout):
                        await warmth.ready.wait()
                except TimeoutError:
                    raise self._timed_out("waiting for the first call on a cold prompt") from None
            yield
        finally:
            warmth.active -= 1
            warmth.last_seen = time.monotonic()
            if leader:
                warmth.ready.set()  # ended or failed without a token: let the others on

    def _timed_out(self, why: str) -> GateTimeout:
        return GateTimeout(f"no gate slot for {self.endpoint} within {self.timeout:g}s ({why})")

    async def _give_back(self, slot: int) -> None:
        """Release ``slot``; if a waiting caller took it, wait (bounded) for its request."""
        handed = await asyncio.shield(self.release(slot))
        if handed is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HANDOVER_WAIT_SECONDS):
                    await handed.wait()

    def sent(self, slot: int) -> None:
        """The holder of ``slot`` has sent its request: a giver waiting on it goes on."""
        handed = self._handed.pop(slot, None)
        if handed is not None:
            handed.set()

    def warmed(self, prefix: str) -> None:
        """A call on ``prefix`` got its first token: the server holds the prefix now."""
        warmth = self._warmth.get(prefix)
        if warmth is not None:
            warmth.last_seen = time.monotonic()
            warmth.ready.set()

    async def acquire(self) -> int:
        """Wait for a slot: handed over in this gate, else polled for; raises ``GateTimeout``."""
        deadline = time.monotonic() + self.timeout
        pause = 0.01
        while True:
            slot = await self._try_take()
            if slot is not None:
                return slot
            said = self._wanted_at
            if self._refused and (said is None or time.monotonic() - said >= RENEW_SECONDS):
                self._wanted_at = time.monotonic()  # another consumer holds it: say we wait
                await self._run_db(self.leases.want, self.endpoint, self.holder)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(f"{self.limit} permit(s) busy")
            slot = await self._wait_for_handover(min(pause, remaining))
            if slot is not None:
                return slot
            pause = min(pause * 2, 0.25)

    async def _try_take(self) -> int | None:
        self._refused = False
        for slot in sorted(self._free):
            if self.held >= self.limit:
                return None
            if slot not in self._free or slot >= self.limit:
                continue  # taken meanwhile, or beyond the limit for every process
            self._free.remove(slot)  # ours while we ask the database
            if time.monotonic() < self._yield_until:
                self._free.append(slot)
                return None
            try:
                locked = await self._lock(slot)
            except BaseException:
                self._free.append(slot)
                raise
            if locked:
                self._in_flight()
                return slot
            self._free.append(slot)  # another process holds it
            self._refused = True
        return None

    async def _lock(self, slot: int) -> bool:
        """Take the slot's lease (``SlotLeases.take``); start renewing while any is held."""
        if not self._adopted:
            # Marked first: a caller arriving meanwhile must not free this run's leases. Its
            # take queues behind this on the gate's one connection.
            self._adopted = True
            freed = await self._run_db(self.leases.give_back_all, self.endpoint, self.holder)
            if freed:
                logger.info(
                    "study_gate_leases_taken_back endpoint=%s holder=%s slots=%s",
                    self.endpoint,
                    self.holder,
                    freed,
                )
        asked = time.monotonic()
        attempt = asyncio.ensure_future(
            self._run_db(self.leases.take, self.endpoint, slot, self.holder)
        )
        try:
            taken = bool(await asyncio.shield(attempt))
        except asyncio.CancelledError:
            # The lease may be taken on the database thread all the same: give it back, or
            # every consumer would lose the slot until it ends.
            if await attempt:
                await self._run_db(self.leases.give_back, self.endpoint, slot, self.holder)
            raise
        if taken:
            self._leased[slot] = asked + self.leases.seconds - RENEW_SECONDS
        if taken and self._renewing is None:
            self._renewing = asyncio.create_task(self._renew_leases())
        return taken

    async def _renew_leases(self) -> None:
        """While this gate holds slots, renew their leases every ``RENEW_SECONDS``."""
        try:
            while self._leased:
                await asyncio.sleep(RENEW_SECONDS)
                try:
                    wanted = await self._run_db(self.leases.wanted, self.endpoint, self.holder)
                    self._yielding = self._yielding or wanted
                    held = sorted(self._leased)
                    if not held:
                        continue
                    asked = time.monotonic()
                    kept = await self._run_db(self.leases.renew, self.endpoint, held, self.holder)
                except DatabaseError as exc:
                    logger.warning(
                        "study_gate_renew_failed endpoint=%s error=%s",
                        self.endpoint,
                        type(exc).__name__,
                    )
                    continue
                still = self._leased.keys() & set(held)  # not given back meanwhile
                for slot in still:
                    self._leased[slot] = asked + self.leases.seconds - RENEW_SECONDS
                if lost := still.difference(kept):
                    # Ended while this process was stalled, maybe taken by another: the
                    # server may see one call too many until this one ends, and the slot
                    # goes to no other call before the database gives it to us again.
                    for slot in lost:
                        del self._leased[slot]
                    logger.warning(
                        "study_gate_lease_lost endpoint=%s held=%s kept=%s",
                        self.endpoint,
                        len(still),
                        len(still) - len(lost),
                    )
        finally:
            self._renewing = None

    async def _wait_for_handover(self, timeout: float) -> int | None:
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass  # a slot handed over just as the timeout fired is still taken below
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                handed = future.result()
                if handed is not None:
                    await self.release(handed)  # handed one as we were cancelled
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(future)
        if future.done() and not future.cancelled():
            return future.result()
        future.cancel()
        return None

    async def release(self, slot: int) -> asyncio.Event | None:
        """Give a slot back: to a waiting caller as it is (returns the event set once that
        caller has sent its request or given the slot back), else to everyone (None; so
        also a slot the limit no longer allows, or one too many since it fell)."""
        self.sent(slot)  # given back unsent (held back, failed): nobody waits on it any more
        within = slot < self.limit and self.held <= self.limit and not self._yielding
        # Never a lease lost, or maybe ended: surely still ours, without asking the database.
        within = within and time.monotonic() < self._leased.get(slot, 0.0)
        while within and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                handed = self._handed[slot] = asyncio.Event()
                return handed
        await self._unlease(slot)
        return None

    async def idle(self) -> None:
        """Say no more that this gate waits (the consumer's cycle ended)."""
        if self._wanted_at is not None:
            self._wanted_at = None
            with contextlib.suppress(DatabaseError):  # it ends by itself
                await self._run_db(self.leases.give_back, self.endpoint, WAITING_SLOT, self.holder)

    async def _unlease(self, slot: int) -> None:
        """Give ``slot``'s lease back to every consumer."""
        self._leased.pop(slot, None)
        if self._yielding:  # to the consumer that waits: ours keep off for a while
            self._yielding, self._yield_until = False, time.monotonic() + YIELD_SECONDS
        try:
            await self._run_db(self.leases.give_back, self.endpoint, slot, self.holder)
        except DatabaseError:
            # The lease ends by itself within LEASE_SECONDS.
            logger.warning("study_gate_unlock_failed endpoint=%s slot=%s", self.endpoint, slot)
        finally:
            self._free.append(slot)
            self._in_flight()
