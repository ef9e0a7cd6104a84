"""Which endpoint a call goes to (``services/pool.py``): one that is up, the one that served
its prompt prefix while it has a free slot, else the fewest callers per permit; a server
that failed is probed by one call at a time; claiming pauses only when every server is down.
The gates are real (``LLMGate`` on the test database); nothing is called here."""

from __future__ import annotations

import time

import pytest

from studyqueue.models import ErrorCode
from studyqueue.services import pool as pool_module
from studyqueue.services.endpoints import Endpoint
from studyqueue.services.gate import LLMGate
from studyqueue.services.llm import LLMClient, LLMError
from studyqueue.services.pool import EndpointPool, Member, State

pytestmark = pytest.mark.django_db


async def _never(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("a choice makes no database call")


def _pool(*permits: int) -> EndpointPool:
    def gate_for(endpoint: Endpoint, client: LLMClient) -> LLMGate:
        return LLMGate(endpoint.url, permits=int(endpoint.permits), run_db=_never)

    return EndpointPool.build(
        [Endpoint(f"http://127.0.0.1:{9000 + i}/v1", permits=p) for i, p in enumerate(permits)],
        gate_for,
    )


def _down() -> LLMError:
    return LLMError(ErrorCode.LLM_UNAVAILABLE, "refused", reached_server=False)


def _spread(pool: EndpointPool, calls: int, prefix: str | None = None) -> list[int]:
    """Commit ``calls`` callers as ``slot()`` would, one after another: how many each got."""
    for _ in range(calls):
        pool.choose(prefix).committed += 1
    return [m.committed for m in pool.members]


def test_callers_spread_in_proportion_to_each_servers_limit():
    pool = _pool(4, 1, 2)
    assert _spread(pool, 14) == [8, 2, 4]


def test_a_server_whose_calls_take_longer_gets_fewer_than_its_limit_says():
    pool = _pool(4, 2)
    fast, slow = pool.members
    fast.served(100, 0.5)  # its limit of 4 is real: calls take 0.5 s
    slow.served(100, 2.0)  # its limit of 2 is not: its calls queue on the server, 2 s each
    # Waits: fast (c + 1) * 0.5 / 4, slow (c + 1) * 2 / 2, about 8 to 1.
    assert _spread(pool, 18) == [16, 2]


def test_a_server_not_measured_yet_counts_a_call_as_long_as_the_others_do():
    pool = _pool(2, 2)
    measured, _unmeasured = pool.members
    measured.served(100, 3.0)
    assert _spread(pool, 4) == [2, 2]


def test_the_server_that_served_a_prefix_gets_it_again_while_it_has_a_free_slot():
    pool = _pool(2, 2)
    second = pool.members[1]
    pool.affinity["v1"] = second
    assert pool.choose("v1") is second
    second.committed = 2  # its slots are taken: the other, rather than queueing behind them
    assert pool.choose("v1") is pool.members[0]
    assert pool.choose("other") is pool.members[0]


def test_a_server_that_is_down_gets_no_call_and_one_call_probes_it_after_its_pause():
    pool = _pool(1, 1)
    first, second = pool.members
    first.breaker.trip(_down())
    assert first.state == State.DOWN and pool.allows()
    assert _spread(pool, 3) == [0, 3]
    first.breaker.open_until = 0.0  # its pause is over
    assert first.state == State.PROBING
    assert pool.choose() is first  # the probe
    first.committed += 1
    assert pool.choose() is second  # one probe at a time
    first.breaker.success()  # the probe answered: it has rejoined
    assert first.state == State.UP and first.available()


def test_a_probed_server_gets_its_probe_while_the_one_that_served_the_prefix_is_free():
    """Under light load the server that served a prefix is free at every call: a server back
    from its pause is probed all the same, else it would rejoin only once the other is full."""
    pool = _pool(1, 1)
    first, second = pool.members
    first.breaker.trip(_down())
    pool.affinity["v1"] = second
    assert pool.choose("v1") is second
    first.breaker.open_until = 0.0  # its pause is over
    assert pool.choose("v1") is first
    first.committed += 1  # the probe is under way: the prefix goes where it went
    assert pool.choose("v1") is second


def test_claiming_pauses_only_when_every_server_is_down():
    pool = _pool(2, 3)
    first, second = pool.members
    assert pool.limit == 5 and pool.remaining() == 0.0 and pool.last_error is None
    first.breaker.trip(_down())
    assert pool.allows() and pool.limit == 3 and pool.failing_since is None
    second.breaker.trip(_down())
    assert not pool.allows() and pool.remaining() > 0 and pool.limit == 1
    assert pool.last_error is not None and pool.failing_since is not None
    # Every one down: a caller still gets the one back soonest (and hands its job back).
    assert pool.choose() in (first, second)


def test_a_failed_server_is_avoided_by_the_call_that_saw_it_fail():
    pool = _pool(1, 1)
    first, second = pool.members
    assert pool.choose(avoid=[first]) is second
    assert pool.other_available([first]) and not pool.other_available([first, second])
    assert pool.choose(avoid=[first, second]) in (first, second)


def test_each_member_reports_its_state_without_credentials(settings):
    member = Member(
        Endpoint("http://user:pw@127.0.0.1:9/v1", "m", "k", 2),
        LLMClient(base_url="http://user:pw@127.0.0.1:9/v1"),
        LLMGate("http://user:pw@127.0.0.1:9/v1", permits=2, run_db=_never),
    )
    member.served(100, 2.0)
    member.served(50, 3.0)
    report = member.report()
    assert report == {
        "name": "http://127.0.0.1:9/v1",
        "url": "http://[redacted]@127.0.0.1:9/v1",  # whole, as health probes it
        "model": "m",
        "state": "up",
        "limit": 2,
        "held": 0,
        "tokens_per_second": 30.0,
        "error": "",
        "detail": "",
        "since": "",
        "auto": False,
        "ceiling": 2,
        "server": "",
        "metrics_fault": "",
    }


def test_calls_older_than_the_rate_window_leave_its_figures(monkeypatch):
    """The window's figures are kept as running sums (a pass over every call of the last ten
    minutes, at each call, cost 0.5 ms at 12,000): an expired call must leave them."""
    monkeypatch.setattr(pool_module, "RATE_WINDOW_SECONDS", 0.2)
    (member,) = _pool(1).members
    member.served(100, 2.0)
    member.served(None, 2.0)  # no count: no tokens, its time counts
    time.sleep(0.25)  # the window lapses
    member.served(30, 1.0)
    assert (member.call_seconds(), member.tokens_per_second(), len(member.recent)) == (1.0, 30.0, 1)
    time.sleep(0.25)
    assert (member.call_seconds(), member.tokens_per_second(), len(member.recent)) == (
        None,
        None,
        0,
    )
