"""The gate's slots as row leases, on every database: one holder per slot under contention
(real threads, each with its own connection), on the database's clock, taken back at once by
a consumer restarted under its worker id, free within ``LEASE_SECONDS`` of a consumer's
death (real processes, SIGKILL); and a slot nobody gives back: waits at the gate are
bounded like any hand-back."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db.models.functions import Now

from studyqueue.models import ErrorCode, GateLease, JobAttempt, StudyQuestionJob
from studyqueue.queue import retry
from studyqueue.queue.enqueue import enqueue
from studyqueue.services import gate as gate_module
from studyqueue.services.endpoints import endpoint_name
from studyqueue.services.gate import LEASE_SECONDS, GateTimeout, LLMGate, SlotLeases
from tests.factories import StudyQuestionFactory
from tests.helpers import Counters, wait_for
from tests.helpers.processes import bulk_jobs, log_text

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_gate_timeout_counts_like_a_release_after_a_call():
    timeout = retry.Failure(ErrorCode.LLM_OVERLOADED, job_at_fault=False)
    bound = retry.MAX_FREE_RELEASES
    for n in range(bound):
        assert retry.decide(timeout, Counters(free_releases=n)).action is retry.Action.RELEASE
    assert retry.decide(timeout, Counters(free_releases=bound)).action is retry.Action.RETRY


def test_gate_timeouts_end_the_job_after_their_bound(llm_server, make_consumer, settings):
    """A slot held and never given back: each wait at the gate hands the job back free twice
    (MAX_FREE_RELEASES), then counts an attempt; after three attempts the job ends failed,
    with nine attempt rows, instead of waiting and being handed back forever."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 1,
        "GATE_TIMEOUT_SECONDS": 0.05,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
        "MAX_ATTEMPTS": 3,
        "CYCLE_BUDGET_SECONDS": 2,
    }
    job = enqueue(StudyQuestionFactory()).job
    consumer = make_consumer()
    asyncio.run(consumer.pool.members[0].gate.acquire())  # the only slot, never given back
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        consumer.run_cycle()
        job.refresh_from_db()
        if job.status != "pending":
            break
    assert (job.status, job.error_code, job.attempts) == ("failed", "llm_overloaded", 3)
    waits = (retry.MAX_FREE_RELEASES + 1) * 3
    assert JobAttempt.objects.filter(job=job).count() == waits
    assert llm_server.stats()["requests"] == 0
    assert StudyQuestionJob.objects.filter(status="processing").count() == 0


ENDPOINT = "http://127.0.0.1:9/v1"


class GateThread:
    """A gate's database thread with a connection of its own, as a consumer's (``run_db``)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)

    async def run_db(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await sync_to_async(fn, thread_sensitive=False, executor=self.pool)(*args)

    def close(self) -> None:
        self.pool.submit(connections.close_all).result()
        self.pool.shutdown()


def test_a_lease_is_one_holders_until_given_back_or_expired():
    first, second = SlotLeases("default", seconds=30), SlotLeases("default", seconds=30)
    assert first.take(ENDPOINT, 0, "a") and not second.take(ENDPOINT, 0, "b")
    assert second.take(ENDPOINT, 1, "b")  # another slot
    assert first.renew(ENDPOINT, [0, 1], "a") == [0]  # slot 1 is not a's
    second.give_back(ENDPOINT, 0, "b")  # not b's: nothing changes
    assert not second.take(ENDPOINT, 0, "b")
    first.give_back(ENDPOINT, 0, "a")
    assert second.take(ENDPOINT, 0, "b")
    dying = SlotLeases("default", seconds=0.05)
    assert dying.take(ENDPOINT, 2, "c") and not first.take(ENDPOINT, 2, "a")
    wait_for(lambda: first.take(ENDPOINT, 2, "a"), timeout=5, what="the lease to expire")
    assert dying.renew(ENDPOINT, [2], "c") == []  # it lost it


def test_a_lease_ends_on_the_databases_clock():
    """The end is the database's now plus the lease, written by the database: what a host's
    own clock says never enters it."""
    assert SlotLeases("default").take(ENDPOINT, 0, "a")
    row = GateLease.objects.annotate(db_now=Now()).get(endpoint=ENDPOINT, slot=0)
    assert row.expires_at is not None
    left = (row.expires_at - row.db_now).total_seconds()
    assert LEASE_SECONDS - 2 < left <= LEASE_SECONDS


def test_takers_racing_for_one_lease_never_both_get_it():
    """Six takers, one slot, real threads with their own connections: each round exactly
    one succeeds."""
    barrier = threading.Barrier(6)

    def take(tag: str) -> bool:
        try:
            barrier.wait(timeout=10)
            return SlotLeases("default").take(ENDPOINT, 7, tag)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=6) as pool:
        for round_ in range(5):
            won = list(pool.map(take, [f"t{round_}-{i}" for i in range(6)]))
            assert won.count(True) == 1, won
            GateLease.objects.filter(endpoint=ENDPOINT, slot=7).update(holder="", expires_at=None)


def test_gates_in_four_threads_never_hold_one_permit_twice():
    """Four consumers' gates at one permit, each on its own thread, event loop and database
    connection, take the slot over and over: never two holders at once, and every caller
    gets its turn."""
    lock = threading.Lock()
    active = peak = done = 0

    def consumer(name: str) -> None:
        nonlocal active, peak, done
        db = GateThread()
        shared = LLMGate(ENDPOINT, run_db=db.run_db, permits=1, timeout=60, holder=name)

        async def calls() -> None:
            nonlocal active, peak, done
            for _ in range(8):
                async with shared.slot():
                    with lock:
                        active += 1
                        peak = max(peak, active)
                    await asyncio.sleep(0.005)  # the call
                    with lock:
                        active -= 1
                        done += 1

        try:
            asyncio.run(calls())
        finally:
            db.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(consumer, f"c{i}") for i in range(4)]:
            future.result(timeout=120)
    assert (peak, done) == (1, 32)
    assert GateLease.objects.get(endpoint=ENDPOINT, slot=0).holder == ""


class BusyConsumer(threading.Thread):
    """A consumer with back-to-back calls on its own thread, event loop and connection: two
    callers at one permit, so one always waits for the slot (a hand-over every time, the
    lease still held). Its calls' (start, end)."""

    def __init__(self, name: str, lock: threading.Lock, holding: list[str]) -> None:
        super().__init__()
        self.name, self.lock, self.holding = name, lock, holding
        self.calls: list[tuple[float, float]] = []
        self.most = 0  # the most holders seen at once
        self.stop = threading.Event()

    def run(self) -> None:
        db = GateThread()
        gate = LLMGate(ENDPOINT, run_db=db.run_db, permits=1, timeout=60, holder=self.name)

        async def caller() -> None:
            while not self.stop.is_set():
                async with gate.slot():
                    with self.lock:
                        self.holding.append(self.name)
                        self.most = max(self.most, len(self.holding))
                    started = time.monotonic()
                    await asyncio.sleep(0.02)  # the call
                    self.calls.append((started, time.monotonic()))
                    with self.lock:
                        self.holding.remove(self.name)

        async def main() -> None:
            await asyncio.gather(caller(), caller())
            await gate.idle()

        try:
            asyncio.run(main())
        finally:
            db.close()


def test_a_consumer_waiting_for_a_handed_over_slot_gets_it_within_a_renewal(monkeypatch):
    """A consumer whose calls come back to back keeps its slot's lease (handed over from
    call to call); another consumer that waits says so, and gets the slot within about one
    renewal; then the first gets it back the same way. Never two holders."""
    monkeypatch.setattr(gate_module, "RENEW_SECONDS", 0.5)
    lock, holding = threading.Lock(), []
    first, second = BusyConsumer("first", lock, holding), BusyConsumer("second", lock, holding)
    first.start()
    try:
        wait_for(lambda: len(first.calls) >= 5, timeout=10, what="the first consumer's calls")
        waiting_since = time.monotonic()
        second.start()
        wait_for(lambda: second.calls, timeout=10, what="the second consumer's first call")
        waited = second.calls[0][0] - waiting_since
        wait_for(
            lambda: any(start > second.calls[0][1] for start, _ in first.calls[5:]),
            timeout=10,
            what="the first consumer's slot back",
        )
    finally:
        first.stop.set()
        second.stop.set()
        first.join(timeout=30)
        second.join(timeout=30)
    assert not first.is_alive() and not second.is_alive()
    assert first.most == second.most == 1
    print(f"second_consumer_waited_s={waited:.2f}")
    assert waited < 3 * gate_module.RENEW_SECONDS, waited  # a renewal, a call, a poll
    # Idle: the slot given back, and neither says it waits any more.
    assert set(GateLease.objects.filter(endpoint=ENDPOINT).values_list("holder", flat=True)) == {""}


@pytest.mark.parametrize("how", ["frozen", "stolen"])
def test_a_lost_lease_is_never_handed_on_before_the_database_gives_it_again(
    how, monkeypatch, caplog
):
    """A consumer holds the only slot, a call of its own waiting for it. ``frozen``: its
    event loop stops (as under SIGSTOP or a VM pause) past the lease, and another consumer
    takes the slot on its own connection; ``stolen``: another consumer takes it after its
    end on the database's clock and the renewal finds it lost. When the call ends, the
    waiting call must not be handed the slot: it waits until the other
    consumer gives it back and the database gives it the lease again."""
    monkeypatch.setattr(gate_module, "RENEW_SECONDS", 0.2)
    db, thief = GateThread(), GateThread()
    seen: list[str] = []  # the database's holder of the slot while the waiting call held it

    async def steal(endpoint: str) -> None:
        def take() -> bool:
            with transaction.atomic():  # no renewal between its end and its taking
                leases = GateLease.objects.filter(endpoint=endpoint, slot=0)
                leases.update(expires_at=Now() - timedelta(seconds=1))  # its end, come early
                return SlotLeases("default", seconds=30).take(endpoint, 0, "other")

        assert await thief.run_db(take)

    async def until(predicate: Callable[[], Any], what: str) -> None:
        deadline = time.monotonic() + 10
        while not await thief.run_db(predicate):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def main() -> None:
        gate = LLMGate(ENDPOINT, run_db=db.run_db, permits=1, holder="w1")
        if how == "frozen":
            gate.leases = SlotLeases("default", seconds=0.5)
        rows = GateLease.objects.filter(endpoint=gate.endpoint)
        waiting = asyncio.Event()

        async def next_call() -> None:
            waiting.set()
            async with gate.slot():
                seen.append(await db.run_db(lambda: rows.get(slot=0).holder))

        async with gate.slot():
            later = asyncio.create_task(next_call())
            await waiting.wait()
            if how == "frozen":
                # The freeze: nothing of this process runs (the loop is blocked, the
                # renewal too) while its lease ends and the other consumer takes the slot.
                other = SlotLeases("default", seconds=30)
                wait_for(
                    lambda: thief.pool.submit(other.take, gate.endpoint, 0, "other").result(),
                    timeout=10,
                    what="the lease to end and the other consumer to take it",
                )
            else:
                await steal(gate.endpoint)

                def lost() -> bool:
                    return any("study_gate_lease_lost" in r.getMessage() for r in caplog.records)

                await until(lost, "the renewal to find the lease lost")
        # The waiting call says it waits for the slot the other consumer holds; then it
        # gets the slot back from the database.
        said = rows.filter(slot=gate_module.WAITING_SLOT, holder="w1")
        await until(lambda: seen or said.exists(), "w1 to wait, or to be handed the slot")
        assert not seen, f"handed the slot while {seen[0]} held it"
        await thief.run_db(SlotLeases("default").give_back, gate.endpoint, 0, "other")
        await later
        await gate.idle()

    try:
        with caplog.at_level(logging.INFO, logger="studyqueue.gate"):
            asyncio.run(main())
    finally:
        db.close()
        thief.close()
    assert seen == ["w1"]


def test_a_consumer_restarted_under_its_worker_id_takes_its_slot_back_at_once(caplog):
    """A consumer dies holding the slot (its gate never gives it back): another consumer
    waits for the lease to end, but the dead one restarted under its worker id takes the
    slot at once."""
    dead, other, restarted = GateThread(), GateThread(), GateThread()
    try:

        async def main() -> None:
            first = LLMGate(ENDPOINT, run_db=dead.run_db, holder="w1")
            await first.acquire()  # and never released: the process died
            with pytest.raises(GateTimeout):
                await LLMGate(ENDPOINT, run_db=other.run_db, holder="w2", timeout=0.3).acquire()
            again = LLMGate(ENDPOINT, run_db=restarted.run_db, holder="w1", timeout=1.0)
            started = time.monotonic()
            async with again.slot():
                assert time.monotonic() - started < 1.0

        with caplog.at_level(logging.INFO, logger="studyqueue.gate"):
            asyncio.run(main())
    finally:
        for db in (dead, other, restarted):
            db.close()
    assert any("study_gate_leases_taken_back" in r.getMessage() for r in caplog.records)
    assert GateLease.objects.get(endpoint=ENDPOINT, slot=0).holder == ""


def _free_after_kill(consumers: Callable[..., Any], llm_server: Any, worker: str) -> float:
    """Start a consumer whose call holds the only slot, SIGKILL it: the seconds from the
    kill until another holder takes the slot."""
    llm_server.configure(held=True)  # its call hangs until it dies
    bulk_jobs(1)
    proc = consumers("--worker-id", worker, GATE_PERMITS=1)
    wait_for(lambda: llm_server.stats()["active"] == 1, timeout=30, what="its call")
    endpoint = endpoint_name(llm_server.url)
    assert GateLease.objects.get(endpoint=endpoint, slot=0).holder == worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    killed_at = time.monotonic()
    leases = SlotLeases("default")
    wait_for(
        lambda: leases.take(endpoint, 0, "probe"),
        timeout=LEASE_SECONDS + 10,
        interval=0.1,
        what="the killed consumer's slot",
    )
    return time.monotonic() - killed_at


@pytest.mark.slow
def test_a_killed_consumers_slot_is_free_within_the_lease(consumers, llm_server):
    waited = _free_after_kill(consumers, llm_server, "killed")
    print(f"slot_free_after_kill_s={waited:.1f}")
    assert waited <= LEASE_SECONDS + 0.5


@pytest.mark.slow
def test_a_killed_consumer_restarted_under_its_worker_id_calls_at_once(consumers, llm_server):
    """Killed holding the only slot, restarted under the same worker id: it frees its
    previous run's lease on its first call instead of waiting for the lease to end."""
    llm_server.configure(held=True)
    bulk_jobs(1)
    proc = consumers("--worker-id", "again", GATE_PERMITS=1)
    wait_for(lambda: llm_server.stats()["active"] == 1, timeout=30, what="its call")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    llm_server.configure(held=False)
    [later] = bulk_jobs(1, text="after the restart {i}")
    restarted = consumers("--worker-id", "again", GATE_PERMITS=1)
    wait_for(
        lambda: StudyQuestionJob.objects.get(study_question_id=later).status == "completed",
        timeout=LEASE_SECONDS + 10,
        interval=0.1,
        what="the restarted consumer's call",
    )
    assert "study_gate_leases_taken_back" in log_text(restarted)
    assert "holder=again slots=1" in log_text(restarted)
