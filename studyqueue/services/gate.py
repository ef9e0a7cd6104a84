"""The gate that bounds concurrent calls to one LLM endpoint.

A gate has ``permits`` numbered slots. Inside a consumer, callers share the gate object,
so its slots bound them. On PostgreSQL each slot taken is also a session advisory lock
on the consumer's database connection, so the bound holds across processes and hosts;
PostgreSQL frees it if the holder dies. On SQLite the process bound is the only one: run
one consumer per LLM server there.

A caller that gives a slot back while another caller of the same gate waits hands it
over directly: the advisory lock stays with the session, and the next call starts
without a database round trip. The giver's ``async with`` then ends only once the taker
has sent its request (``sent(slot)``) or given the slot back, within
``HANDOVER_WAIT_SECONDS``: what the giver does next (storing its reply) would otherwise
compete with the taker's call start for the interpreter, while the server idles.

Warm-first: a caller that names the prompt it sends (``prefix``, e.g. the prompt
version's hash) is admitted alone while that prefix is cold for this gate (first use,
after a restart, after ``idle_seconds`` without a call); the others with the same prefix
wait before taking a slot until the first call's first token (``warmed``) or its end, so
they find the prefix in the server's prompt cache instead of all prefilling it at once.
With one permit calls run one at a time anyway, and nothing waits.

Adaptive (``GATE_PERMITS=auto``): given a ``GateController``, the gate numbers
``max_limit`` slots but lets callers take only those below the controller's current
``limit`` (so on PostgreSQL a slot at or above the limit is taken by no process) and below
its own ``max_limit`` (a consumer's maximum bounds its own calls, not the shared limit), tells it
how many calls it holds, and hands it each call's outcome (``record``, ``record_loss``).

Usage::

    gate = LLMGate(url, permits=1, timeout=600, run_db=consumer.db, db="default")
    async with gate.slot(prefix=version.hash) as slot:
        reply = await client.chat(
            messages,
            on_sent=lambda: gate.sent(slot),
            on_first_token=lambda: gate.warmed(version.hash),
        )

The circuit breaker (``CircuitBreaker``) lives beside it: while the LLM server fails as a
whole, it stops claiming for a while. The gate bounds how many calls go at once; the
breaker, whether any go.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

import psycopg
from django.db import DatabaseError, connections
from django.db.models import Q
from django.utils import timezone

from studyqueue.exceptions import StudyQueueError
from studyqueue.models import ErrorCode, GateLease
from studyqueue.queue import pg, retry
from studyqueue.services.endpoints import endpoint_name
from studyqueue.services.gate_control import Change, GateController
from studyqueue.services.llm import LLMError

breaker_logger = logging.getLogger("studyqueue.breaker")


class CircuitBreaker:
    """Tracks server-wide LLM failures and how long claiming should pause.

    How long each trip pauses is the failure policy's (``retry.RetryStrategy.breaker_pause``:
    doubling per consecutive trip, or the server's Retry-After, within ``BREAKER_BASE_SECONDS``
    and ``BREAKER_MAX_SECONDS``). Any success closes it.

    Failures that arrive together are one failure, as they are one loss for the adaptive
    gate: a call that started before the breaker's last opening (``LLMError.call_started``)
    saw the same outage as the call that opened it, so its failure neither counts another
    trip (the pause would double once per call in flight) nor logs another line.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.open_until = 0.0
        self.opened_at: float | None = None  # monotonic time of the last counted failure
        self.last_error: LLMError | None = None
        self.failing_since: datetime | None = None  # the first failure of this run of them

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
        # A rejection that hits every job is a configuration error: say so loudly.
        level = logging.ERROR if error.code == ErrorCode.LLM_REJECTED else logging.WARNING
        breaker_logger.log(
            level,
            "study_llm_paused error_code=%s failures=%s pause_s=%.1f detail=%r",
            error.code,
            self.failures,
            pause,
            error.message[:200],
        )
        return pause

    def success(self) -> None:
        """A call went through: the server is back; close the breaker."""
        with self._lock:
            was_open, self.failures, self.open_until = self.failures, 0, 0.0
            self.failing_since = self.opened_at = None
        if was_open:
            breaker_logger.info("study_llm_resumed after_failures=%s", was_open)


logger = logging.getLogger("studyqueue.gate")

# First int of the two-int advisory lock key: the "studyqueue gate" namespace.
LOCK_NAMESPACE = 0x5347  # "SG"

# After this long without a call on a prefix, the next call warms it alone again. The
# server's prompt cache is bounded (LRU), not timed: a minute of silence is when other
# work sharing the server has likely pushed our prefix out, and re-warming costs only one
# call's time to first token, so erring on the short side is cheap.
WARM_IDLE_SECONDS = 60.0

# The most a caller that handed its slot over waits for the taker's request to go out: a
# request is written in milliseconds; a slow connect only delays the giver's storing.
HANDOVER_WAIT_SECONDS = 0.5

# A caller that has waited this long (or half its timeout, if shorter) for a slot held by
# another session asks ``reclaim`` whether its holder is stuck; a gate asks at most this
# often. A live holder gives its slot back within one call; a stuck one is reclaimed only
# past the stall bound, so asking sooner or more often would only cost queries.
RECLAIM_CHECK_SECONDS = 1.0

P = ParamSpec("P")
T = TypeVar("T")


class RunDB(Protocol):
    """``await run_db(fn, *args, **kwargs)``: runs the sync (ORM) function ``fn`` on one
    database connection, always the same (the consumer's ``Consumer.gate_db``)."""

    def __call__(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[T]: ...


# ``reclaim(db, endpoint, {slot: lock key})``, run on the gate's connection: frees the slots
# among these whose holder is proven stuck (``services.gate_reclaim``); how many it freed.
Reclaim = Callable[[str, str, dict[int, int]], int]


class GateTimeout(StudyQueueError):
    """No gate slot became free within the timeout."""


class _Warmth:
    """One prefix's state: ``ready`` once a call's first token came (or the call ended)."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.active = 0  # calls on this prefix inside ``slot()`` (waiting or holding)
        self.last_seen = time.monotonic()


def lock_key(endpoint: str, slot: int) -> int:
    """The second int of a slot's advisory lock key: endpoint hash and slot number."""
    return ((zlib.crc32(endpoint.encode()) & 0x7FFF) << 16 | slot) & 0x7FFFFFFF


# PostgreSQL keeps an application_name to NAMEDATALEN - 1 bytes.
_APPLICATION_NAME_BYTES = 63
_TAG_PREFIX = "studyqueue-gate "


def holder_tag(worker_id: str) -> str:
    """The ``application_name`` a consumer's gate session carries while it takes slots: how
    another consumer finds, in ``pg_stat_activity``, whose session holds a slot. A worker id
    too long for it is named by a hash (compared the same way, never truncated: a cut id
    could name another consumer)."""
    tag = _TAG_PREFIX + worker_id
    if len(tag.encode()) <= _APPLICATION_NAME_BYTES:
        return tag
    return f"{_TAG_PREFIX}#{hashlib.sha256(worker_id.encode()).hexdigest()[:32]}"


class SlotLocks(Protocol):
    """Where a gate's slots are held beyond this process (``slot_locks`` picks one). Each
    method runs on the gate's thread (``RunDB``)."""

    # Whether a slot held by a stuck process can be reclaimed (``services.gate_reclaim``;
    # a lease expires by itself instead).
    reclaims: bool
    # Whether held slots must be renewed (``renew``) before ``LEASE_SECONDS`` run out.
    leases: bool

    def take(self, endpoint: str, slot: int, tag: str) -> bool:
        """Take ``slot`` if no other process holds it."""
        ...

    def give_back(self, endpoint: str, slot: int, tag: str) -> None:
        """Free a slot this process holds."""
        ...

    def renew(self, endpoint: str, slots: list[int], tag: str) -> int:
        """Keep the held ``slots``; how many were still this process's."""
        ...

    def close(self) -> None:
        """Close what it holds open (the gate's consumer is closing)."""
        ...


_TRY_LOCK = "SELECT pg_try_advisory_lock(%s, %s)"
# The same round trip names the session for ``pg_stat_activity`` (again after a reconnect):
# the holder a reclaim looks for (``gate_reclaim``).
_TRY_LOCK_TAGGED = "SELECT pg_try_advisory_lock(%s, %s), set_config('application_name', %s, false)"
_UNLOCK = "SELECT pg_advisory_unlock(%s, %s)"


def _lock_params(endpoint: str, slot: int, tag: str) -> tuple[str, list[Any]]:
    key = lock_key(endpoint, slot)
    if tag:
        return _TRY_LOCK_TAGGED, [LOCK_NAMESPACE, key, tag]
    return _TRY_LOCK, [LOCK_NAMESPACE, key]


class AdvisoryLocks:
    """Session advisory locks on the gate's own connection to database ``db``: PostgreSQL
    reached straight. PostgreSQL frees them when the session ends."""

    reclaims, leases = True, False

    def __init__(self, db: str) -> None:
        self.db = db

    def take(self, endpoint: str, slot: int, tag: str) -> bool:
        with connections[self.db].cursor() as cursor:
            cursor.execute(*_lock_params(endpoint, slot, tag))
            return bool(cursor.fetchone()[0])

    def give_back(self, endpoint: str, slot: int, tag: str) -> None:
        with connections[self.db].cursor() as cursor:
            cursor.execute(_UNLOCK, [LOCK_NAMESPACE, lock_key(endpoint, slot)])

    def renew(self, endpoint: str, slots: list[int], tag: str) -> int:
        return len(slots)  # a session's locks last as long as it does

    def close(self) -> None:
        pass  # the store closes the gate's connection


class DirectLocks:
    """Session advisory locks on a connection of the gate's own that bypasses a transaction
    pooler (``DIRECT_DATABASE_URL``): claims and writes go through the pooler, the locks stay
    on one real session. Opened on first use, again after it failed (its locks went with it)."""

    reclaims, leases = True, False

    def __init__(self, settings_dict: Mapping[str, object]) -> None:
        self.settings_dict = settings_dict
        self._conn: psycopg.Connection[Any] | None = None

    def _run(self, sql: str, params: list[Any]) -> object:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = pg.connect(self.settings_dict, autocommit=True)
            row = self._conn.execute(sql, params).fetchone()
        except psycopg.Error as exc:
            self.close()
            raise DatabaseError(f"the gate's direct session failed: {type(exc).__name__}") from exc
        return row[0] if row else None

    def take(self, endpoint: str, slot: int, tag: str) -> bool:
        return bool(self._run(*_lock_params(endpoint, slot, tag)))

    def give_back(self, endpoint: str, slot: int, tag: str) -> None:
        self._run(_UNLOCK, [LOCK_NAMESPACE, lock_key(endpoint, slot)])

    def renew(self, endpoint: str, slots: list[int], tag: str) -> int:
        return len(slots)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


# A lease lasts this long unless its holder renews it; a held slot is renewed every third of
# it. A consumer that died frees its slots within this; one that is alive never loses one.
LEASE_SECONDS = 60.0


class LeaseLocks:
    """Row leases (``GateLease``) through any pooler: PostgreSQL behind a transaction pooler
    without ``DIRECT_DATABASE_URL``. A slot is taken by the one update that finds its row
    free or expired (PostgreSQL re-checks the condition on the row it locked, so two takers
    never both succeed), renewed while held, freed by its holder."""

    reclaims, leases = False, True

    def __init__(self, seconds: float = LEASE_SECONDS) -> None:
        self.seconds = seconds
        self._rows: set[tuple[str, int]] = set()  # rows known to exist

    def take(self, endpoint: str, slot: int, tag: str) -> bool:
        if (endpoint, slot) not in self._rows:
            GateLease.objects.bulk_create(
                [GateLease(endpoint=endpoint, slot=slot)], ignore_conflicts=True
            )
            self._rows.add((endpoint, slot))
        now = timezone.now()
        free = Q(holder="") | Q(expires_at__lt=now)
        taken = GateLease.objects.filter(free, endpoint=endpoint, slot=slot).update(
            holder=tag, expires_at=now + timedelta(seconds=self.seconds)
        )
        return taken == 1

    def give_back(self, endpoint: str, slot: int, tag: str) -> None:
        GateLease.objects.filter(endpoint=endpoint, slot=slot, holder=tag).update(
            holder="", expires_at=None
        )

    def renew(self, endpoint: str, slots: list[int], tag: str) -> int:
        until = timezone.now() + timedelta(seconds=self.seconds)
        held = GateLease.objects.filter(endpoint=endpoint, slot__in=slots, holder=tag)
        return held.update(expires_at=until)

    def close(self) -> None:
        pass


def slot_locks(db: str) -> SlotLocks | None:
    """Where database ``db`` lets a gate hold its slots (``pg.mode``): None on SQLite (the
    process bound is the only one), session advisory locks on PostgreSQL reached straight or
    through ``DIRECT_DATABASE_URL``, row leases behind a pooler without it."""
    found = pg.mode(db)
    if found is pg.Mode.NONE:
        return None
    if found is pg.Mode.SESSION:
        return AdvisoryLocks(db)
    if found is pg.Mode.DIRECT:
        return DirectLocks(pg.direct_settings())
    return LeaseLocks()


class LLMGate:
    """``permits`` slots for one endpoint, shared by every caller of this object.

    ``run_db`` runs a sync function on the consumer's gate connection: advisory locks are
    session locks, so every lock and unlock must go to that one session. They are taken
    when database ``db`` is PostgreSQL.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        run_db: RunDB,
        permits: int = 1,
        timeout: float = 600.0,
        db: str = "default",
        idle_seconds: float = WARM_IDLE_SECONDS,
        controller: GateController | None = None,
        holder: str = "",
        reclaim: Reclaim | None = None,
        locks: SlotLocks | None = None,
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
        self._db = db
        self._free = list(range(permits))  # slots nobody in this process holds
        # A waiter is handed a slot, or None: look again (the limit rose).
        self._waiters: deque[asyncio.Future[int | None]] = deque()
        self.idle_seconds = idle_seconds
        self._warmth: dict[str, _Warmth] = {}
        self._handed: dict[int, asyncio.Event] = {}  # slot -> set once its taker sent
        # Where slots are held beyond this process, fixed by the database: read once (on
        # the event loop, ``connections[db]`` builds a connection object per task).
        self.locks = locks if locks is not None else slot_locks(db)
        # PostgreSQL: the session that takes slots says whose it is (``holder_tag``), and a
        # caller kept waiting by another session may reclaim a stuck holder's slot. A lease
        # names its holder too: this gate, unique among processes.
        self._tag = holder_tag(holder) if holder else ""
        if self.locks is not None and self.locks.leases and not self._tag:
            self._tag = holder_tag(f"{socket.gethostname()}:{os.getpid()}:{id(self)}")
        self._reclaim = reclaim if self.locks is not None and self.locks.reclaims else None
        self._reclaim_checked_at = -math.inf
        self._renewing: asyncio.Task[None] | None = None

    @property
    def free_slots(self) -> int:
        """Slots no caller of this gate holds (another process may hold them)."""
        return len(self._free)

    @property
    def limit(self) -> int:
        """Slots callers may take now: ``permits``, or the controller's limit within this
        consumer's ``GATE_MAX_PERMITS`` (``GateController.allowed``)."""
        return self.permits if self.controller is None else self.controller.allowed

    @property
    def shared_limit(self) -> int:
        """The endpoint's limit as every consumer shares it (``GateLimit``): ``limit``, or
        the controller's, which another consumer's larger maximum may set above ours."""
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
            change = self.controller.loss()
            if change is not None:
                self._changed(change, detail=f" error_code={code}")

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
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Let every waiter look for a slot again: more may be taken now."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _in_flight(self) -> None:
        if self.controller is not None:
            self.controller.in_flight(self.held)

    @contextlib.asynccontextmanager
    async def slot(self, prefix: str | None = None) -> AsyncIterator[int]:
        """Hold one slot for the body of the ``async with``.

        ``prefix`` names the prompt prefix the call sends: while it is cold, one call goes
        first and the others wait for its ``warmed(prefix)`` or its end (see the module).
        """
        if prefix is None or self.permits == 1:
            slot = await self.acquire()
            try:
                yield slot
            finally:
                await self._give_back(slot)
            return
        warmth = self._warmth.get(prefix)
        now = time.monotonic()
        leader = warmth is None or (
            warmth.active == 0 and now - warmth.last_seen > self.idle_seconds
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
                    raise GateTimeout(
                        f"no gate slot for {self.endpoint} within {self.timeout:g}s "
                        "(waiting for the first call on a cold prompt)"
                    ) from None
            slot = await self.acquire()
            try:
                yield slot
            finally:
                await self._give_back(slot)
        finally:
            warmth.active -= 1
            warmth.last_seen = time.monotonic()
            if leader:
                warmth.ready.set()  # ended or failed without a token: let the others on

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
        """Wait for a slot (its number); raises ``GateTimeout``.

        Waits for a hand-over from a caller of this gate; a slot held by another
        process is polled for with a growing pause.
        """
        started = time.monotonic()
        deadline = started + self.timeout
        pause = 0.01
        while True:
            slot = await self._try_take()
            if slot is not None:
                return slot
            if time.monotonic() - started >= min(RECLAIM_CHECK_SECONDS, self.timeout / 2):
                await self._check_stuck()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GateTimeout(
                    f"no gate slot for {self.endpoint} within {self.timeout:g}s "
                    f"({self.limit} permit(s) busy)"
                )
            slot = await self._wait_for_handover(min(pause, remaining))
            if slot is not None:
                return slot
            pause = min(pause * 2, 0.25)

    async def _check_stuck(self) -> None:
        """Ask ``reclaim`` about the slots below the limit that another session holds (at
        most every ``RECLAIM_CHECK_SECONDS`` per gate); a freed slot is taken next."""
        now = time.monotonic()
        if self._reclaim is None or now - self._reclaim_checked_at < RECLAIM_CHECK_SECONDS:
            return
        if self.held >= self.limit:
            return  # this process's own calls fill the limit: a hand-over comes
        self._reclaim_checked_at = now
        others = {s: lock_key(self.endpoint, s) for s in sorted(self._free) if s < self.limit}
        if not others:
            return
        try:
            await self._run_db(self._reclaim, self._db, self.endpoint, others)
        except DatabaseError as exc:
            logger.warning(
                "study_gate_reclaim_failed endpoint=%s error=%s", self.endpoint, type(exc).__name__
            )

    async def _try_take(self) -> int | None:
        for slot in sorted(self._free):
            if self.held >= self.limit:
                return None
            if slot not in self._free or slot >= self.limit:
                continue  # taken meanwhile, or beyond the limit for every process
            self._free.remove(slot)  # ours while we ask the database
            try:
                locked = await self._lock(slot)
            except BaseException:
                self._free.append(slot)
                raise
            if locked:
                self._in_flight()
                return slot
            self._free.append(slot)  # another process holds it
        return None

    async def _lock(self, slot: int) -> bool:
        """Take the slot beyond this process (``locks``); True where there is none."""
        locks = self.locks
        if locks is None:
            return True
        attempt = asyncio.ensure_future(self._run_db(locks.take, self.endpoint, slot, self._tag))
        try:
            taken = bool(await asyncio.shield(attempt))
        except asyncio.CancelledError:
            # The lock may be taken on the database thread all the same: undo it, or the
            # session would keep it (advisory locks stack) and other processes lose a slot.
            if await attempt:
                await self._run_db(locks.give_back, self.endpoint, slot, self._tag)
            raise
        if taken and locks.leases and self._renewing is None:
            self._renewing = asyncio.create_task(self._renew_leases())
        return taken

    async def _renew_leases(self) -> None:
        """While this gate holds slots as leases, renew them every third of their life."""
        assert self.locks is not None
        try:
            while self.held:
                await asyncio.sleep(LEASE_SECONDS / 3)
                held = sorted(set(range(self.permits)) - set(self._free))
                if not held:
                    continue
                try:
                    kept = await self._run_db(self.locks.renew, self.endpoint, held, self._tag)
                except DatabaseError as exc:
                    logger.warning(
                        "study_gate_renew_failed endpoint=%s error=%s",
                        self.endpoint,
                        type(exc).__name__,
                    )
                    continue
                if kept < len(held):
                    # Expired while this process was stalled, maybe taken by another: the
                    # server may see one call too many until this one ends.
                    logger.warning(
                        "study_gate_lease_lost endpoint=%s held=%s kept=%s",
                        self.endpoint,
                        len(held),
                        kept,
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
        within = slot < self.limit and self.held <= self.limit
        while within and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                handed = self._handed[slot] = asyncio.Event()
                return handed
        try:
            if self.locks is not None:
                await self._run_db(self.locks.give_back, self.endpoint, slot, self._tag)
        except DatabaseError:
            # The connection is gone, and with it the session's lock.
            logger.warning("study_gate_unlock_failed endpoint=%s slot=%s", self.endpoint, slot)
        finally:
            self._free.append(slot)
            self._in_flight()
        return None
