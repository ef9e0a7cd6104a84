"""The gate: a bound on concurrent LLM calls inside a process and, on PostgreSQL, across them."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection

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
    return psycopg.connect(
        dbname=cfg["NAME"],
        user=cfg["USER"] or None,
        password=cfg["PASSWORD"] or None,
        host=cfg["HOST"] or None,
        port=cfg["PORT"] or None,
        autocommit=True,
    )


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
