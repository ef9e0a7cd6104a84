"""The gate: a bound on concurrent LLM calls inside a process and, on PostgreSQL, across them."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from studyqueue.pg import psycopg_kwargs
from studyqueue.services.mlx_gate import _LOCK_NAMESPACE, GateTimeout, MLXGate

pytestmark = pytest.mark.django_db

ENDPOINT = "http://127.0.0.1:9/v1"


def test_permits_bound_concurrent_holders():
    active = 0
    peak = 0

    async def call(gate: MLXGate) -> None:
        nonlocal active, peak
        async with gate:
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1

    async def main() -> None:
        await asyncio.gather(*(call(MLXGate(ENDPOINT, permits=2, timeout=5)) for _ in range(6)))

    async_to_sync(main)()
    assert peak == 2


def test_acquire_times_out_while_all_slots_are_held():
    async def main() -> None:
        holder = MLXGate(ENDPOINT, permits=1, timeout=1)
        await holder.acquire()
        try:
            with pytest.raises(GateTimeout, match="1 permit"):
                await MLXGate(ENDPOINT, permits=1, timeout=0.1).acquire()
        finally:
            await holder.release()
        async with MLXGate(ENDPOINT, permits=1, timeout=0.1):
            pass

    async_to_sync(main)()


def test_endpoints_have_separate_slots():
    async def main() -> None:
        async with (
            MLXGate(ENDPOINT, permits=1, timeout=0.1),
            MLXGate("http://127.0.0.1:10/v1", permits=1, timeout=0.1),
        ):
            pass

    async_to_sync(main)()


def _other_session() -> psycopg.Connection:
    cfg = connection.settings_dict
    return psycopg.connect(**psycopg_kwargs(cfg), autocommit=True)


@pytest.mark.postgres
def test_slots_are_shared_across_sessions_and_freed_when_a_holder_dies():
    gate = MLXGate(ENDPOINT, permits=1, timeout=0.2)
    other = _other_session()  # another consumer process's connection
    other.execute("SELECT pg_advisory_lock(%s, %s)", [_LOCK_NAMESPACE, gate._lock_key(0)])

    async def try_acquire() -> bool:
        try:
            async with MLXGate(ENDPOINT, permits=1, timeout=0.2):
                return True
        except GateTimeout:
            return False

    assert async_to_sync(try_acquire)() is False
    other.close()  # the holder dies: PostgreSQL releases its session lock
    assert async_to_sync(try_acquire)() is True


@pytest.mark.postgres
def test_a_held_slot_blocks_another_session():
    async def hold_and_probe() -> bool:
        async with MLXGate(ENDPOINT, permits=1, timeout=1):
            probe = _other_session()
            try:
                key = MLXGate(ENDPOINT)._lock_key(0)
                row = probe.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_NAMESPACE, key]
                ).fetchone()
                return bool(row[0])
            finally:
                probe.close()

    assert async_to_sync(hold_and_probe)() is False


def test_a_waiter_on_the_same_loop_is_handed_the_slot(vendor):
    order: list[str] = []

    async def holder(release: asyncio.Event) -> None:
        async with MLXGate(ENDPOINT, permits=1, timeout=5):
            order.append("a-in")
            await release.wait()
            order.append("a-out")

    async def waiter(started: asyncio.Event) -> bool:
        started.set()
        async with MLXGate(ENDPOINT, permits=1, timeout=5) as gate:
            order.append("b-in")
            if vendor != "postgresql":
                return True
            # While b is inside, this session holds the advisory lock: others are kept out.
            probe = _other_session()
            try:
                key = gate._lock_key(0)
                row = probe.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_NAMESPACE, key]
                ).fetchone()
                return not row[0]
            finally:
                probe.close()

    async def main() -> bool:
        release, started = asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(holder(release))
        await asyncio.sleep(0)
        b = asyncio.create_task(waiter(started))
        await started.wait()
        await asyncio.sleep(0.02)  # b usually waits at the gate by now; the asserts hold either way
        release.set()
        await a
        return await b

    assert async_to_sync(main)() is True
    assert order == ["a-in", "a-out", "b-in"]
