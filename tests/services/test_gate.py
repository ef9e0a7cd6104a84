"""The gate: a bound on concurrent LLM calls inside a consumer and, through its row leases,
across them; and the circuit breaker: failures that arrive together are one failure."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.db.models.functions import Now

from studyqueue.models import ErrorCode, GateLease
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.services import gate as gate_module
from studyqueue.services.endpoints import Endpoint, endpoint_name
from studyqueue.services.gate import CircuitBreaker, GateTimeout, LLMGate, SlotLeases
from studyqueue.services.gate_control import GateController
from studyqueue.services.llm import TOKENIZE_SECONDS, LLMClient, LLMError, LLMReply
from studyqueue.services.pool import EndpointPool, Member
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.llm_server import ANSWER


def _down(started: float | None) -> LLMError:
    return LLMError(ErrorCode.LLM_UNAVAILABLE, "down", call_started=started)


def test_calls_running_at_an_opening_count_once_and_later_calls_count_again(settings):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    before = time.monotonic()
    first = breaker.trip(_down(before))
    for _ in range(7):  # the other calls in flight when the server went away
        assert breaker.trip(_down(before)) <= first
    assert breaker.failures == 1
    assert breaker.trip(_down(time.monotonic())) > first  # started after it opened: a new trip
    assert breaker.failures == 2
    assert breaker.trip(_down(None)) and breaker.failures == 3  # no start known: counted
    breaker.success()
    assert breaker.trip(_down(before)) and breaker.failures == 1  # a new run of failures


@pytest.mark.django_db(transaction=True)
def test_a_server_restart_under_eight_calls_is_one_failure_and_one_warning(
    llm_server, make_consumer, settings, caplog
):
    """Eight calls in flight when the model server goes away fail together: the breaker
    opens once, with the first pause (not 2 -> 4 -> ... -> 60 s), and says so once."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 8,
        "BATCH_SIZE": 8,
        "BREAKER_BASE_SECONDS": 2,
        "BREAKER_MAX_SECONDS": 60,
        "LLM_TIMEOUT_SECONDS": 120,
    }
    # Long generations: each streams a word a second (the first word lets the gate's
    # warm-first send the others).
    llm_server.configure(word_delay=1.0, answer=" ".join(["word"] * 120))
    for _ in range(8):
        enqueue(StudyQuestionFactory())
    consumer = make_consumer(worker_id="restart")
    cycle = threading.Thread(target=consumer.run_cycle)
    with caplog.at_level(logging.INFO, logger="studyqueue"):
        cycle.start()
        wait_for(lambda: llm_server.stats()["active"] == 8, timeout=30, what="8 calls in flight")
        llm_server.stop()  # the restart: every connection dropped at once
        cycle.join(timeout=60)
        assert not cycle.is_alive()
    breaker = consumer.pool.members[0].breaker
    assert breaker.failures == 1
    assert 0 < breaker.remaining() <= 2
    paused = [r for r in caplog.records if r.getMessage().startswith("study_llm_paused ")]
    assert len(paused) == 1, [r.getMessage() for r in paused]
    assert "failures=1 pause_s=2.0" in paused[0].getMessage()
    assert not transitions.StudyQuestionJob.objects.exclude(status="pending").exists()


def test_an_outage_is_logged_at_its_start_when_its_error_changes_and_once_a_minute(
    settings, caplog, monkeypatch
):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    slow = LLMError(ErrorCode.LLM_TIMEOUT, "slow")
    with caplog.at_level(logging.DEBUG, logger="studyqueue"):
        for error in [_down(None), _down(None), _down(None), slow, slow]:
            breaker.trip(error)
        monkeypatch.setattr(gate_module, "OUTAGE_LOG_SECONDS", 0.0)  # a minute later
        breaker.trip(slow)
        breaker.success()
        breaker.trip(slow)  # a new outage
    paused = [r for r in caplog.records if r.getMessage().startswith("study_llm_paused ")]
    levels = [logging.getLevelName(r.levelno) for r in paused]
    assert levels == ["WARNING", "DEBUG", "DEBUG", "WARNING", "DEBUG", "WARNING", "WARNING"]
    assert "failures=6 " in paused[5].getMessage() and "down_s=" in paused[5].getMessage()


def test_the_server_coming_back_is_good_news_logged_at_info(settings, caplog):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    breaker.trip(_down(None))
    with caplog.at_level(logging.DEBUG, logger="studyqueue"):
        breaker.success()
    (resumed,) = [r for r in caplog.records if r.getMessage().startswith("study_llm_resumed ")]
    assert resumed.levelno == logging.INFO


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


def _leased(slot: int = 0) -> bool:
    """Whether the slot's lease is held and not ended (read on a connection of its own, as
    another consumer would)."""
    try:
        leases = GateLease.objects.filter(endpoint=ENDPOINT, slot=slot, expires_at__gt=Now())
        return leases.exclude(holder="").exists()
    finally:
        connection.close()


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


def test_a_waiter_is_handed_the_slot_as_it_is_released(db_thread):
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
            # Handed over inside this consumer: the lease stays held throughout.
            return await asyncio.to_thread(_leased)

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


def test_a_giver_goes_on_once_the_taker_of_its_slot_has_sent_its_request(db_thread):
    shared = gate(db_thread)
    steps: list[str] = []

    async def giver(release: asyncio.Event) -> None:
        async with shared.slot():
            await release.wait()
        steps.append("giver goes on")  # e.g. to store its reply

    async def taker(send: asyncio.Event, finish: asyncio.Event) -> None:
        async with shared.slot() as slot:
            steps.append("taker in")
            await send.wait()
            steps.append("taker sent")
            shared.sent(slot)
            await finish.wait()

    async def main() -> None:
        release, send, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()
        given = asyncio.create_task(giver(release))
        while shared.free_slots:
            await asyncio.sleep(0)
        taken = asyncio.create_task(taker(send, finish))
        while not shared._waiters:  # the taker waits at the gate
            await asyncio.sleep(0.001)
        release.set()
        while "taker in" not in steps:
            await asyncio.sleep(0)
        for _ in range(20):  # the loop turns; the giver still waits for the request
            await asyncio.sleep(0)
        assert not given.done()
        send.set()
        async with asyncio.timeout(5):
            await given
        finish.set()
        await taken

    asyncio.run(main())
    assert steps == ["taker in", "taker sent", "giver goes on"]


def test_a_taker_that_gives_the_slot_back_unsent_lets_the_giver_on(db_thread):
    shared = gate(db_thread)

    async def main() -> None:
        release = asyncio.Event()

        async def giver() -> None:
            async with shared.slot():
                await release.wait()

        given = asyncio.create_task(giver())
        while shared.free_slots:
            await asyncio.sleep(0)
        taker = asyncio.create_task(shared.acquire())
        while not shared._waiters:
            await asyncio.sleep(0.001)
        release.set()
        slot = await taker
        assert not given.done()
        await shared.release(slot)  # held back (a pause, the breaker): no request
        for _ in range(50):  # a few turns of the loop, not the hand-over's time bound
            if given.done():
                break
            await asyncio.sleep(0)
        assert given.done() and shared.free_slots == 1

    asyncio.run(main())


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


def test_another_consumers_lease_holds_the_slot_until_it_ends(db_thread):
    other = SlotLeases("default", seconds=1.0)  # another consumer, then dead: no renewal
    assert other.take(ENDPOINT, 0, "other")

    async def try_acquire(timeout: float) -> float | None:
        started = time.monotonic()
        try:
            async with gate(db_thread, timeout=timeout).slot():
                return time.monotonic() - started
        except GateTimeout:
            return None

    assert asyncio.run(try_acquire(0.2)) is None
    waited = asyncio.run(try_acquire(5.0))
    assert waited is not None and waited < 2.0  # taken once the lease ended


def test_a_held_slot_is_leased_while_held_and_free_after(db_thread):
    shared = gate(db_thread)

    async def hold_and_probe() -> bool:
        async with shared.slot():
            return await asyncio.to_thread(_leased)

    assert asyncio.run(hold_and_probe()) is True
    assert _leased() is False
    assert GateLease.objects.get(endpoint=ENDPOINT, slot=0).holder == ""


# ---------------------------------------------------------------- warm-first


def _calls(shared: LLMGate, server, prefix: str | None, n: int = 4) -> None:
    """``n`` calls at once through the gate to the test server, as the explanation
    worker makes them (``prefix``, the first token reported to the gate)."""
    server.reset_stats()

    async def one(client: LLMClient) -> None:
        async with shared.slot(prefix=prefix):
            warmed = None if prefix is None else (lambda: shared.warmed(prefix))
            await client.chat([{"role": "user", "content": "Q"}], on_first_token=warmed)

    async def main() -> None:
        async with LLMClient(base_url=server.url, timeout=10, max_connections=n) as client:
            await asyncio.gather(*(one(client) for _ in range(n)))

    asyncio.run(main())


def _joined_after_first_token(server) -> bool:
    """Whether the server saw one request alone until it had sent that request's first
    token, then the others (all of them at once: max_active counts them)."""
    starts, firsts = sorted(server.starts), sorted(server.first_tokens)
    return starts[1] >= firsts[0] and server.max_active >= 2


@pytest.fixture
def first_token_late(llm_server):
    # The first token comes 0.3 s after a request, the rest over ~0.25 s more: requests
    # sent together overlap; one sent after another's first token finds it still running.
    llm_server.configure(delay=0.3, word_delay=0.05)
    return llm_server


def test_a_cold_prompt_is_sent_once_and_the_others_join_after_its_first_token(
    db_thread, first_token_late
):
    shared = gate(db_thread, permits=4)
    _calls(shared, first_token_late, prefix="v1")
    assert _joined_after_first_token(first_token_late)
    # Warm now: the next four go together.
    _calls(shared, first_token_late, prefix="v1")
    assert first_token_late.max_active == 4


def test_without_a_prefix_or_with_one_permit_nothing_waits(db_thread, first_token_late):
    _calls(gate(db_thread, permits=4), first_token_late, prefix=None)
    assert first_token_late.max_active == 4
    _calls(gate(db_thread, permits=1), first_token_late, prefix="v1")
    assert first_token_late.max_active == 1
    assert first_token_late.requests == 4


def test_a_new_prompt_version_cools_the_gate_again(db_thread, first_token_late):
    shared = gate(db_thread, permits=4)
    _calls(shared, first_token_late, prefix="v1", n=1)
    _calls(shared, first_token_late, prefix="v2")
    assert _joined_after_first_token(first_token_late)


def test_an_idle_spell_cools_the_gate(db_thread, first_token_late, monkeypatch):
    # WARM_IDLE_SECONDS=0: any pause between calls counts as an idle spell.
    monkeypatch.setattr("studyqueue.services.gate.WARM_IDLE_SECONDS", 0.0)
    shared = LLMGate(ENDPOINT, permits=4, timeout=5, run_db=db_thread)
    _calls(shared, first_token_late, prefix="v1", n=1)
    _calls(shared, first_token_late, prefix="v1")
    assert _joined_after_first_token(first_token_late)


def test_a_failed_first_call_lets_the_others_on(db_thread, llm_server):
    llm_server.configure(fault="503")
    shared = gate(db_thread, permits=4)

    async def one(client: LLMClient) -> str:
        async with shared.slot(prefix="v1"):
            try:
                await client.chat([{"role": "user", "content": "Q"}])
            except LLMError as error:
                return error.code
        return "ok"

    async def main() -> list[str]:
        async with LLMClient(base_url=llm_server.url, timeout=5) as client:
            async with asyncio.timeout(10):
                return await asyncio.gather(*(one(client) for _ in range(4)))

    codes = asyncio.run(main())
    assert len(codes) == 4 and "ok" not in codes
    assert llm_server.requests == 4


def _six_calls_on_one_slot(db_thread, url: str) -> tuple[list[LLMReply], float]:
    """Six calls at once through a pool of one server at one permit: replies, wall time."""
    client = LLMClient(base_url=url, timeout=60)
    pool = EndpointPool([Member(Endpoint(url), client, gate(db_thread, timeout=60))])

    async def one() -> LLMReply:
        async with pool.slot() as held:
            return await held.chat([{"role": "user", "content": "Q"}])

    async def main() -> list[LLMReply]:
        try:
            return await asyncio.gather(*(one() for _ in range(6)))
        finally:
            await pool.aclose()

    started = time.monotonic()
    replies = asyncio.run(main())
    return replies, time.monotonic() - started


def test_counting_a_replys_tokens_never_holds_the_gate(db_thread, llm_server):
    """A server that streams no usage has each reply counted by its tokenizer: one that takes
    2.5 s delays no other call (the count comes after the slot is given back, within its own
    deadline; the chunks' count stands when it does not answer in time); one that answers
    gives its count to the reply the caller holds."""
    llm_server.configure(flavour="llamacpp", stream_usage=False, delay=0.2, tokenize_delay=2.5)
    replies, wall = _six_calls_on_one_slot(db_thread, llm_server.url)
    gaps = llm_server.idle_gaps_ms()
    print(f"six_calls_slow_tokenizer_s={wall:.2f} longest_gap_ms={max(gaps):.0f}")
    assert max(gaps) < 300, gaps  # the next call went as soon as the last reply ended
    assert wall < 6 * 0.2 + TOKENIZE_SECONDS + 1.0
    words = len(ANSWER.split(" "))
    assert {(r.completion_tokens, r.tokens_counted) for r in replies} == {(words, True)}
    llm_server.configure(tokenize_delay=0)
    replies, wall = _six_calls_on_one_slot(db_thread, llm_server.url)
    print(f"six_calls_fast_tokenizer_s={wall:.2f}")
    assert {(r.completion_tokens, r.tokens_counted) for r in replies} == {(len(ANSWER), True)}


# ---------------------------------------------------------------- adaptive (GATE_PERMITS=auto)


def _adaptive(run_db, limit: int, max_limit: int = 8) -> LLMGate:
    controller = GateController(max_limit=max_limit)
    controller.restore(limit, {})
    return LLMGate(ENDPOINT, run_db=run_db, timeout=5.0, controller=controller)


def test_an_adaptive_gate_lets_through_only_its_limit_and_follows_a_raise(db_thread):
    shared = _adaptive(db_thread, limit=2)
    active = peak = 0
    taken: set[int] = set()

    async def call() -> None:
        nonlocal active, peak
        async with shared.slot() as slot:
            taken.add(slot)
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1

    async def main(calls: int) -> None:
        await asyncio.gather(*(call() for _ in range(calls)))

    asyncio.run(main(8))
    assert peak == 2 and taken <= {0, 1}
    assert shared.permits == 8 and shared.free_slots == 8

    async def raised_while_waiting() -> None:
        # Each call holds its slot until released: how many run at once does not hang on how
        # fast a loaded machine hands a slot on (20 ms calls could end before the raise).
        release = asyncio.Event()

        async def held() -> None:
            nonlocal active, peak
            async with shared.slot():
                active += 1
                peak = max(peak, active)
                await release.wait()
                active -= 1

        async def until(count: int) -> None:
            deadline = asyncio.get_running_loop().time() + 10
            while active < count and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)

        waiting = asyncio.gather(*(held() for _ in range(8)))
        await until(2)
        shared.adopt(4)  # another consumer raised the endpoint's limit
        await until(4)
        assert active == 4  # the raise let two more in while the first two still held theirs
        release.set()
        await waiting

    peak = 0
    asyncio.run(raised_while_waiting())
    assert peak == 4 and shared.free_slots == 8


def test_slots_at_or_above_the_limit_are_taken_by_no_process(db_thread):
    shared = _adaptive(db_thread, limit=2)

    async def hold_two_and_probe() -> list[bool]:
        async with shared.slot(), shared.slot():
            return [await asyncio.to_thread(_leased, slot) for slot in range(4)]

    assert asyncio.run(hold_two_and_probe()) == [True, True, False, False]


def test_an_adaptive_gate_halves_on_a_refused_connection(db_thread, free_port):
    shared = _adaptive(db_thread, limit=4)
    client = LLMClient(base_url=f"http://127.0.0.1:{free_port}/v1", timeout=2)

    async def main() -> None:
        try:
            async with shared.slot():
                with pytest.raises(LLMError) as raised:
                    await client.chat([{"role": "user", "content": "hi"}])
                shared.record_loss(raised.value.code)
        finally:
            await client.aclose()

    asyncio.run(main())
    assert shared.limit == 2


# ---------------------------------------------------------------- one name per server


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/v1/",
        "HTTP://LocalHost:9/v1//",
        "http://user:s3cret@localhost:9/v1",
        "http://[redacted]@127.0.0.1:9/v1/",
        "  http://127.0.0.1:9/v1?x=1#f",
    ],
)
def test_every_spelling_of_one_server_names_one_gate(url):
    assert endpoint_name(url) == ENDPOINT
    assert LLMGate(url, run_db=None).endpoint == ENDPOINT  # type: ignore[arg-type]


def test_default_ports_and_other_servers():
    assert endpoint_name("https://Example.COM:443/v1/") == "https://example.com/v1"
    assert endpoint_name("http://example.com:80/v1") == "http://example.com/v1"
    assert endpoint_name("http://example.com:8080/v1") == "http://example.com:8080/v1"
    assert endpoint_name("http://[::1]:9/v1/") == "http://[::1]:9/v1"
    assert endpoint_name("http://127.0.0.1:9/v2") != ENDPOINT
    assert endpoint_name("http://127.0.0.1:10/v1") != ENDPOINT
    # Credentials never reach a name, even in a URL that does not parse.
    assert "s3cret" not in endpoint_name("http://u:s3cret@[::1/v1")


def test_two_spellings_of_one_url_share_the_slots_across_sessions(db_thread):
    other_pool = ThreadPoolExecutor(max_workers=1)  # a second consumer's gate connection

    async def other_db(fn, *args):  # type: ignore[no-untyped-def]
        return await sync_to_async(fn, thread_sensitive=False, executor=other_pool)(*args)

    first = gate(db_thread, endpoint="http://127.0.0.1:9/v1")
    second = gate(other_db, endpoint="http://localhost:9/v1/", timeout=0.3)

    async def main() -> None:
        async with first.slot():
            with pytest.raises(GateTimeout):
                async with second.slot():
                    pass
        async with second.slot():
            pass

    try:
        asyncio.run(main())
    finally:
        other_pool.submit(connections.close_all).result()
        other_pool.shutdown()
