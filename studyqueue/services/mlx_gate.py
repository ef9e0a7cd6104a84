"""The gate that bounds concurrent calls to one LLM endpoint, for every caller.

A gate has ``permits`` numbered slots per endpoint. Inside a process a slot is taken
from a process-wide set (so callers on different threads or event loops share the
bound). On PostgreSQL a slot is also a session advisory lock, so the bound holds across
processes and hosts; the database releases it if the holder dies. On SQLite the
process bound is the only one: run one consumer per LLM server there.

Usage::

    async with MLXGate.for_settings():
        reply = await client.chat(messages)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import zlib
from collections import deque
from types import TracebackType

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection

from studyqueue.conf import conf
from studyqueue.exceptions import StudyQueueError

logger = logging.getLogger("studyqueue.gate")

# First int of the two-int advisory lock key: "studyqueue gate" namespace.
_LOCK_NAMESPACE = 0x5347  # "SG"

_held_lock = threading.Lock()
_held: dict[str, set[int]] = {}
# Callers waiting for a slot, per endpoint, with the event loop each waits on.
_waiters: dict[str, deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]]] = {}


class GateTimeout(StudyQueueError):
    """No gate slot became free within the timeout."""


def _endpoint_key(endpoint: str) -> int:
    # Advisory keys are int4 pairs; the second half encodes endpoint and slot.
    return zlib.crc32(endpoint.encode()) & 0x7FFF


def _use_advisory_locks() -> bool:
    return connection.vendor == "postgresql"


def _try_lock(key: int) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_NAMESPACE, key])
        return bool(cur.fetchone()[0])


def _unlock(key: int) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_NAMESPACE, key])


class MLXGate:
    """An async context manager holding one of ``permits`` slots for ``endpoint``."""

    def __init__(self, endpoint: str, *, permits: int = 1, timeout: float = 600.0) -> None:
        if permits < 1:
            raise ValueError("a gate needs at least one permit")
        self.endpoint = endpoint
        self.permits = permits
        self.timeout = timeout
        self._slot: int | None = None

    @classmethod
    def for_settings(cls) -> MLXGate:
        """The gate for the configured LLM endpoint."""
        return cls(conf.LLM_URL, permits=conf.GATE_PERMITS, timeout=conf.GATE_TIMEOUT_SECONDS)

    def _lock_key(self, slot: int) -> int:
        return (_endpoint_key(self.endpoint) << 16 | slot) & 0x7FFFFFFF

    def _reserve_local(self, slot: int) -> bool:
        with _held_lock:
            held = _held.setdefault(self.endpoint, set())
            if slot in held:
                return False
            held.add(slot)
            return True

    def _free_local(self, slot: int) -> None:
        with _held_lock:
            _held.get(self.endpoint, set()).discard(slot)

    async def _try_acquire(self) -> int | None:
        for slot in range(self.permits):
            if not self._reserve_local(slot):
                continue  # another caller in this process holds it
            if not _use_advisory_locks():
                return slot
            try:
                locked = await sync_to_async(_try_lock, thread_sensitive=True)(self._lock_key(slot))
            except DatabaseError:
                self._free_local(slot)
                raise
            if locked:
                return slot
            self._free_local(slot)  # another process holds it
        return None

    async def acquire(self) -> int:
        """Wait for a free slot; raises ``GateTimeout``.

        A waiter on the releasing caller's event loop is handed the slot directly (no
        database round trip, no polling delay); other waiters poll with backoff.
        """
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        deadline = started + self.timeout
        pause = 0.005
        waited = False
        while True:
            slot = await self._try_acquire()
            if slot is None:
                if not waited:
                    # DEBUG: with claims pipelined, every job waits for its predecessor.
                    logger.debug(
                        "study_gate_wait endpoint=%s permits=%s", self.endpoint, self.permits
                    )
                    waited = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise GateTimeout(
                        f"no gate slot for {self.endpoint} within {self.timeout:g}s "
                        f"({self.permits} permit(s) busy)"
                    )
                slot = await self._wait_for_handoff(loop, min(pause, remaining))
                pause = min(pause * 2, 0.05)
            if slot is not None:
                if waited:
                    logger.debug(
                        "study_gate_acquired endpoint=%s slot=%s waited_ms=%d",
                        self.endpoint,
                        slot,
                        (time.monotonic() - started) * 1000,
                    )
                self._slot = slot
                return slot

    async def _wait_for_handoff(
        self, loop: asyncio.AbstractEventLoop, timeout: float
    ) -> int | None:
        future: asyncio.Future[int] = loop.create_future()
        entry = (loop, future)
        with _held_lock:
            _waiters.setdefault(self.endpoint, deque()).append(entry)
        try:
            # Awaited directly: a handed-over slot wakes this task in one loop step.
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass  # a slot handed over just as the timeout fired is still taken below
        except BaseException:
            # Cancelled while a slot was being handed to us: pass it on, then stop.
            if future.done() and not future.cancelled():
                await self._give_back(future.result())
            raise
        finally:
            with _held_lock, contextlib.suppress(ValueError):
                _waiters.get(self.endpoint, deque()).remove(entry)
            if not future.done():
                future.cancel()
        return future.result() if future.done() and not future.cancelled() else None

    async def _give_back(self, slot: int) -> None:
        loop = asyncio.get_running_loop()
        with _held_lock:
            queue = _waiters.get(self.endpoint, deque())
            for entry in list(queue):
                waiter_loop, future = entry
                # Only a waiter on this loop shares this task's DB session, and so the
                # advisory lock: hand the slot over as it is.
                if waiter_loop is loop and not future.done():
                    queue.remove(entry)
                    future.set_result(slot)
                    return
        try:
            if _use_advisory_locks():
                await sync_to_async(_unlock, thread_sensitive=True)(self._lock_key(slot))
        except DatabaseError:
            # The connection is gone, and with it the session lock.
            logger.warning("study_gate_unlock_failed endpoint=%s slot=%s", self.endpoint, slot)
        finally:
            self._free_local(slot)

    async def release(self) -> None:
        """Give the slot back (a no-op when none is held)."""
        slot, self._slot = self._slot, None
        if slot is not None:
            await self._give_back(slot)

    async def __aenter__(self) -> MLXGate:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
