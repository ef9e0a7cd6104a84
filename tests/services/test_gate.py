"""The gate: a bound on concurrent LLM calls inside a consumer and, on PostgreSQL, across them."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from studyqueue.pg import psycopg_kwargs
from studyqueue.services.gate import LOCK_NAMESPACE, GateTimeout, LLMGate, lock_key

pytestmark = pytest.mark.django_db(transaction=True)

ENDPOINT = "http://127.0.0.1:9/v1"


@pytest.fixture
def db_thread():
    """One connection for the gate's database work, reached as a consumer's jobs connection
    is (``Consumer.db``, the gate's ``run_db``)."""
    pool = ThreadPoolExecutor(max_workers=1)

    async def run_db(fn, *args):  # type: ignore[no-untyped-def]
        return await sync_to_async(fn, thread_sensitive=False, executor=pool)(*args)

    yield run_db
    pool.submit(connections.close_all).result()
    pool.shutdown()


def gate(run_db, *, permits: int = 1, timeout: float = 5.0, endpoint: str = ENDPOINT) -> LLMGate:
    return LLMGate(endpoint, permits=permits, timeout=timeout, run_db=run_db)


def _other_session() -> psycopg.Connection:
    return psycopg.connect(**psycopg_kwargs(connection.settings_dict), autocommit=True)


def _locked_elsewhere(slot: int = 0) -> bool:
    """Whether another session holds the slot's advisory lock (probed from a new one)."""
    with _other_session() as probe:
        row = probe.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, lock_key(ENDPOINT, slot)]
        ).fetchone()
        return not row[0]


def test_permits_bound_concurrent_holders(db_thread):
    shared = gate(db_thread, permits=2)
    active = peak = 0

    async def call() -> None:
        nonlocal active, peak
        async with shared.slot():
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1

    async def main() -> None:
        await asyncio.gather(*(call() for _ in range(6)))

    asyncio.run(main())
    assert peak == 2


def test_acquire_times_out_while_all_slots_are_held(db_thread):
    shared = gate(db_thread, timeout=0.1)

    async def main() -> None:
        slot = await shared.acquire()
        try:
            with pytest.raises(GateTimeout, match="1 permit"):
                await shared.acquire()
        finally:
            await shared.release(slot)
        async with shared.slot():
            pass

    asyncio.run(main())


def test_a_waiter_is_handed_the_slot_as_it_is_released(db_thread, vendor):
    shared = gate(db_thread)
    order: list[str] = []

    async def holder(release: asyncio.Event) -> None:
        async with shared.slot():
            order.append("a-in")
            await release.wait()
            order.append("a-out")

    async def waiter() -> bool:
        async with shared.slot():
            order.append("b-in")
            # While b holds the slot, this consumer's session keeps the advisory lock.
            return vendor != "postgresql" or await asyncio.to_thread(_locked_elsewhere)

    async def main() -> bool:
        release = asyncio.Event()
        a = asyncio.create_task(holder(release))
        while not order:
            await asyncio.sleep(0)
        b = asyncio.create_task(waiter())
        while not shared._waiters:  # b waits at the gate
            await asyncio.sleep(0.001)
        release.set()
        await a
        return await b

    assert asyncio.run(main()) is True
    assert order == ["a-in", "a-out", "b-in"]


def test_a_cancelled_waiter_loses_no_slot(db_thread):
    shared = gate(db_thread)

    async def main() -> None:
        slot = await shared.acquire()
        waiter = asyncio.create_task(shared.acquire())
        while not shared._waiters:
            await asyncio.sleep(0.001)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await shared.release(slot)
        async with asyncio.timeout(1):
            async with shared.slot():
                pass

    asyncio.run(main())


@pytest.mark.postgres
def test_slots_are_shared_across_sessions_and_freed_when_a_holder_dies(db_thread):
    other = _other_session()  # another consumer process's connection
    other.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, lock_key(ENDPOINT, 0)])

    async def try_acquire() -> bool:
        try:
            async with gate(db_thread, timeout=0.2).slot():
                return True
        except GateTimeout:
            return False

    assert asyncio.run(try_acquire()) is False
    other.close()  # the holder dies: PostgreSQL releases its session lock
    assert asyncio.run(try_acquire()) is True


@pytest.mark.postgres
def test_a_held_slot_blocks_another_session_and_is_unlocked_after(db_thread):
    shared = gate(db_thread)

    async def hold_and_probe() -> bool:
        async with shared.slot():
            return await asyncio.to_thread(_locked_elsewhere)

    assert asyncio.run(hold_and_probe()) is True
    assert _locked_elsewhere() is False
