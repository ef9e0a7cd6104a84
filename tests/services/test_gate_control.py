"""The adaptive gate's controller on a virtual clock: deterministic, no database, no sleep."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studyqueue.services.gate_control import (
    MAX_WINDOW_CALLS,
    MIN_WINDOW_CALLS,
    GateController,
    Reason,
)
from tests.helpers.batching_sim import VirtualClock, adaptive, fixed


def _window(controller: GateController, clock: VirtualClock, *, speed: float, tokens: int = 100):
    """A full window of calls at the current limit, each ``speed`` tokens/s; the last
    call's change (or None)."""
    change = None
    seconds = tokens / speed
    controller.in_flight(controller.limit)
    clock.now += seconds  # the first calls at this limit, all started after it was set
    limit, calls = controller.limit, 0
    while calls < controller.window_calls and change is None:
        clock.now += seconds / limit
        change = controller.sample(tokens=tokens, seconds=seconds)
        calls += 1
    return change


def test_doubles_while_tokens_per_second_rises_then_holds_at_the_maximum():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    seen = []
    for _ in range(6):
        change = _window(controller, clock, speed=20.0)  # each call as fast: rate ~ limit
        if change is not None:
            seen.append((change.old, change.new, change.reason))
    assert seen == [(1, 2, Reason.CLIMB), (2, 4, Reason.CLIMB), (4, 8, Reason.CLIMB)]
    assert controller.limit == 8 and not controller.slow_start


def test_steps_back_when_tokens_per_second_stops_rising_and_time_per_token_grows():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # limit 1: 20 tokens/s
    assert controller.limit == 2
    change = _window(controller, clock, speed=10.0)  # limit 2: 2 x 10, each call twice as slow
    # One flat step is not the end: a batching server may pay only from 4 on.
    assert change is not None and (change.old, change.new, change.reason) == (2, 4, Reason.CLIMB)
    change = _window(controller, clock, speed=5.0)  # limit 4: 4 x 5, flat again
    assert change is not None
    assert (change.old, change.new, change.reason) == (4, 1, Reason.STEP_BACK)
    # It holds: windows at 1 change nothing for HOLD_WINDOWS windows.
    for _ in range(controller.hold_windows):
        assert _window(controller, clock, speed=20.0) is None
    assert controller.rates[1] == pytest.approx(20.0, rel=0.01)
    assert controller.rates[2] == pytest.approx(20.0, rel=0.01)
    assert controller.rates[4] == pytest.approx(20.0, rel=0.01)


def test_looks_past_a_flat_step_to_a_batching_gain():
    """mlx_lm.server batches in slices: 2 calls may gain nothing over 1 and 4 nearly 2x."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # 1: 20 tokens/s
    _window(controller, clock, speed=10.5)  # 2: 21, flat
    assert controller.limit == 4
    _window(controller, clock, speed=9.0)  # 4: 36, it paid
    assert controller.limit == 8
    change = _window(controller, clock, speed=4.6)  # 8: 37, flat at the maximum
    assert change is not None and (change.old, change.new) == (8, 4)
    assert not controller.slow_start


def test_settles_on_the_best_of_the_climb_not_the_last_step():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # 1: 20
    _window(controller, clock, speed=20.0)  # 2: 40
    _window(controller, clock, speed=8.0)  # 4: 32, worse than 2: one more step to be sure
    assert controller.limit == 8
    _window(controller, clock, speed=4.0)  # 8: 32
    assert controller.limit == 2 and not controller.slow_start


def test_a_window_grows_with_the_spread_of_its_calls_and_lasts_a_minimum_time():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock, min_window_seconds=3.0)
    controller.in_flight(1)
    for n in range(8):  # speeds 10 and 30: a spread of 0.5, so ~100 calls are wanted
        clock.now += 1.0
        controller.sample(tokens=10 if n % 2 else 30, seconds=1.0)
    assert controller.window_calls == MAX_WINDOW_CALLS
    # Two calls side by side (a batching server's slices): a window lasts the minimum time.
    quick = GateController(
        max_limit=8, limit=2, clock=clock, min_window_seconds=3.0, hold_windows=0
    )
    quick.in_flight(2)
    start = clock.now
    for _ in range(16):  # steady calls, but 16 of them in 0.8 s: shorter than the minimum
        clock.now += 0.05
        assert quick.sample(tokens=10, seconds=0.1) is None
    assert quick.limit == 2
    while quick.limit == 2:
        clock.now += 0.05
        quick.sample(tokens=10, seconds=0.1)
    assert clock.now - start >= 3.0


def test_one_call_at_a_time_needs_no_minimum_time():
    """Alone, a call's speed depends on no batching slice: the first window at one call at a
    time (the worst limit on a batching server) ends on its calls, not on the clock."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock, min_window_seconds=3.0)
    controller.in_flight(1)
    for _ in range(MIN_WINDOW_CALLS // 2):
        clock.now += 0.1
        change = controller.sample(tokens=10, seconds=0.1)
    assert change is not None and (change.old, change.new) == (1, 2)
    assert clock.now < 1.0


def test_a_loss_halves_once_per_overload():
    clock = VirtualClock()
    controller = GateController(max_limit=8, limit=8, rates={8: 100.0}, clock=clock)
    change = controller.loss()
    assert change is not None and (change.old, change.new, change.reason) == (8, 4, Reason.LOSS)
    assert change.rate == 100.0
    assert controller.loss() is None  # the calls already running see the same overload
    clock.now += 5.0
    assert controller.loss().new == 2  # type: ignore[union-attr]
    clock.now += 5.0
    assert controller.loss().new == 1  # type: ignore[union-attr]
    clock.now += 5.0
    assert controller.loss() is None and controller.limit == 1  # never below one


def test_never_climbs_when_the_backlog_cannot_fill_the_limit():
    clock = VirtualClock()
    controller = GateController(max_limit=8, limit=2, rates={2: 40.0}, clock=clock, hold_windows=0)
    for _ in range(10):
        controller.in_flight(1)  # one job at a time: the gate of 2 is never full
        for _ in range(controller.window_calls):
            clock.now += 5.0
            assert controller.sample(tokens=100, seconds=5.0) is None
    assert controller.limit == 2


def test_a_restored_limit_starts_one_step_at_a_time_after_a_hold():
    """After its hold, the climb first measures half the limit (fewer calls may do as well);
    half does worse here, so it climbs one step at a time from where it began."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, limit=4, rates={4: 80.0}, clock=clock, hold_windows=1)
    assert not controller.slow_start and controller.window_calls == 8
    assert _window(controller, clock, speed=20.0) is None  # the hold
    change = _window(controller, clock, speed=20.0)
    assert change is not None and (change.old, change.new, change.reason) == (
        4,
        2,
        Reason.PROBE_DOWN,
    )
    change = _window(controller, clock, speed=20.0)  # 2: 40 tokens/s, half of 4's
    assert change is not None and (change.old, change.new, change.reason) == (2, 5, Reason.CLIMB)


def test_a_limit_an_unlucky_window_chose_is_left_at_the_next_climb():
    """Settled on 2 on a server that only queues (its yardstick at 1 came out low): after the
    hold, the climb measures 1, finds it does as well, and settles there."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, limit=2, rates={2: 20.0}, clock=clock, hold_windows=1)
    assert _window(controller, clock, speed=10.0) is None  # the hold at 2: 20 tokens/s
    change = _window(controller, clock, speed=10.0)
    assert change is not None and (change.old, change.new, change.reason) == (
        2,
        1,
        Reason.PROBE_DOWN,
    )
    assert _window(controller, clock, speed=20.0) is None  # 1: 20 tokens/s, as well: stays
    assert controller.limit == 1


def test_adopt_follows_another_consumer_and_measures_afresh():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    change = controller.adopt(6)
    assert change is not None and (change.old, change.new, change.reason) == (1, 6, Reason.SHARED)
    assert controller.adopt(6) is None
    # Another consumer's larger maximum: kept as the shared limit, this one calls 8 at most.
    assert controller.adopt(99).new == 99  # type: ignore[union-attr]
    assert (controller.limit, controller.allowed) == (99, 8)


def test_a_consumer_below_the_shared_limit_never_moves_it_by_its_own_maximum():
    """GATE_MAX_PERMITS bounds this consumer's calls; the shared limit stays another's."""
    clock = VirtualClock()
    controller = GateController(max_limit=2, clock=clock, hold_windows=0)
    change = controller.restore(8, {8: 160.0})
    assert change is not None and (change.new, change.reason) == (8, Reason.RESTORED)
    assert (controller.limit, controller.allowed, controller.capped) == (8, 2, True)
    for _ in range(30):  # full windows at its own maximum, flat or not: nothing to judge
        assert _window(controller, clock, speed=20.0) is None
        assert _window(controller, clock, speed=5.0) is None
    assert controller.limit == 8 and controller.window_calls == 8
    # A loss is the server's, whoever sees it: the shared limit halves.
    assert controller.loss().new == 4  # type: ignore[union-attr]
    assert controller.allowed == 2


def test_calls_that_began_under_another_limit_are_not_counted():
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    clock.now = 10.0
    controller.adopt(4)
    clock.now = 11.0
    for _ in range(50):
        assert controller.sample(tokens=100, seconds=5.0) is None  # began at 6 s, before 10 s
    assert controller.rates == {}


@pytest.mark.parametrize("knee", [1, 4, 8])
def test_the_simulated_server_targets(knee):
    """The issue's targets on the batching simulation (the bench prints the figures)."""
    jobs = 400
    best = max(fixed(c, jobs=jobs, knee=knee).tokens_per_second for c in range(1, 9))
    gate1 = fixed(1, jobs=jobs, knee=knee)
    run, _ = adaptive(jobs=jobs, knee=knee)
    assert run.settled is not None and run.settled <= 200
    steady = run.tokens_per_second_between(run.settled, run.settled + 200)
    assert steady >= 0.9 * best
    if knee == 1:
        assert run.tokens_per_second >= 0.95 * gate1.tokens_per_second
        assert run.seconds_per_token <= 1.5 * gate1.seconds_per_token


def test_backs_off_within_one_window_when_the_server_answers_503():
    run, controller = adaptive(jobs=300, knee=8, fail_from_job=200)
    assert run.limits[199] == 8
    assert run.losses_before_halving is not None
    assert run.losses_before_halving <= 8  # one window at 8 is 16 calls
    # Halved once: 100 instant 503s within one call's length are one overload, not 100.
    assert controller.limit == 4


@settings(max_examples=40, deadline=None)
@given(
    knee=st.integers(min_value=1, max_value=12),
    noise=st.floats(min_value=0.0, max_value=0.3),
    seed=st.integers(min_value=0, max_value=2**16),
    max_limit=st.integers(min_value=1, max_value=8),
)
def test_any_knee_and_noise_ends_near_the_best_fixed_gate(knee, noise, seed, max_limit):
    jobs = 500
    run, _ = adaptive(max_limit=max_limit, jobs=jobs, knee=knee, noise=noise, seed=seed)
    assert all(1 <= limit <= max_limit for limit in run.limits)
    best = max(
        fixed(c, jobs=jobs, knee=knee, noise=noise, seed=seed).tokens_per_second
        for c in range(1, max_limit + 1)
    )
    assert run.tokens_per_second_between(300, jobs) >= 0.8 * best


def _calls_until_change(controller: GateController, clock: VirtualClock, *, speed: float) -> int:
    """Calls at the current limit, each ``speed`` tokens/s, until the limit moves."""
    seconds = 100 / speed
    limit = controller.limit
    controller.in_flight(limit)
    clock.now += seconds  # the first calls at this limit, all started after it was set
    for calls in range(1, 1000):
        clock.now += seconds / limit
        if controller.sample(tokens=100, seconds=seconds) is not None:
            return calls
    raise AssertionError("the limit never moved")


def test_a_step_is_judged_from_half_its_calls_whether_it_pays_or_not():
    """A step that clearly pays and one that clearly costs tokens/s end as soon alike (from
    half the least window), instead of the second waiting for its whole window."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # 1: 20 tokens/s
    assert _calls_until_change(controller, clock, speed=20.0) == 4  # 2: 40, it pays
    assert controller.limit == 4
    assert controller.window_calls == 8
    # 4: 4 x 2.5 = 10 tokens/s, clearly worse than 40: judged as soon as a paying one.
    assert _calls_until_change(controller, clock, speed=2.5) == 4
    assert controller.limit == 8  # one more step to be sure (the look-ahead)


def test_the_first_window_of_a_climb_is_judged_from_half_the_calls_it_wants():
    """The yardstick at one call at a time (the worst limit on a batching server) no longer
    waits for its whole window: half of what its spread asks for."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    controller.in_flight(1)
    calls = 0
    while controller.limit == 1:  # speeds 10 and 30: a spread of 0.5, 48 calls wanted
        calls += 1
        clock.now += 1.0
        controller.sample(tokens=10 if calls % 2 else 30, seconds=1.0)
    assert calls == MAX_WINDOW_CALLS // 2


@pytest.mark.parametrize("tokens", [100, 5])  # replies of 5 s alone, and of 0.25 s
def test_over_a_short_backlog_auto_comes_near_the_best_fixed_gate(tokens):
    """240 jobs against a server that serves 4 at once, the ramp from one call included:
    the median over seeds of the whole run reaches 0.85 of the best fixed gate."""
    ratios = []
    for seed in range(7):
        sim = {"jobs": 240, "knee": 4, "seed": seed, "tokens": tokens}
        best = max(fixed(c, **sim).tokens_per_second for c in range(1, 9))
        run, _ = adaptive(**sim)
        ratios.append(run.tokens_per_second / best)
    assert statistics.median(ratios) >= 0.85


def test_a_server_that_says_requests_wait_stops_the_climb_where_it_is():
    """vLLM's ``num_requests_waiting`` above 0 (``server_limits``): the climb ends at once,
    settling as if the next step had not paid, and goes no higher until the next climb."""
    clock = VirtualClock()
    controller = GateController(max_limit=64, clock=clock, hold_windows=1)
    for _ in range(3):
        _window(controller, clock, speed=20.0)  # 1 -> 2 -> 4 -> 8, each step paying
    assert controller.limit == 8
    change = controller.server_full()
    assert change is None or change.reason == Reason.STEP_BACK
    settled = controller.limit
    assert settled <= 8
    # The hold's one window passes; the next climb may try higher again, from where it is.
    seen = [_window(controller, clock, speed=20.0) for _ in range(4)]
    assert any(c is not None and c.new > settled for c in seen)


def test_a_server_that_only_queues_settles_on_one_call_though_two_hide_the_clients_gap():
    """Two calls on a server that serves one at a time gain only the client's time between
    calls (+10 %), while each call waits behind the other (time per token ~2x): no step pays
    enough for the calls it adds, and the climb settles on 1."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # 1: 20 tokens/s, the server idle between calls
    assert controller.limit == 2
    _window(controller, clock, speed=11.0)  # 2: 22, +10 %: not worth a second call
    assert controller.limit == 4  # one more step to be sure (a batching server pays from 4)
    change = _window(controller, clock, speed=5.5)  # 4: 22
    assert change is not None
    assert (change.old, change.new, change.reason) == (4, 1, Reason.STEP_BACK)


def test_a_step_that_pays_for_its_calls_still_climbs():
    """A batching server below its knee: doubling gives far more than GAIN_EXPONENT asks."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    _window(controller, clock, speed=20.0)  # 1: 20
    _window(controller, clock, speed=13.0)  # 2: 26, +30 %: pays
    assert controller.limit == 4


P, S = Reason.PROBE_DOWN, Reason.STEP_BACK


@pytest.mark.parametrize(
    "speeds,moves",
    [
        # Only queues: every halving does as well, down to one call.
        ({8: 2.5, 4: 5.0, 2: 10.0, 1: 20.0}, [(8, 4, P), (4, 2, P), (2, 1, P)]),
        # Batches up to 8: half the calls give half the tokens/s; back to 8.
        ({8: 20.0, 4: 20.0}, [(8, 4, P), (4, 8, S)]),
        # Its knee is 4: 2 calls give 24 tokens/s, 4 and 8 give 40; back to 4.
        ({8: 5.0, 4: 10.0, 2: 12.0}, [(8, 4, P), (4, 2, P), (2, 4, S)]),
    ],
)
def test_a_climb_that_starts_at_the_maximum_probes_down(speeds, moves):
    """A limit restored (or shared) at the maximum has nothing above to try: the climb
    measures half the calls, and lower while they do as well, then settles on the lowest
    that does. Before, such a limit stayed at the maximum whatever the server gained."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, limit=8, rates={8: 20.0}, clock=clock, hold_windows=1)
    assert _window(controller, clock, speed=speeds[8]) is None  # the hold
    seen = []
    while (change := _window(controller, clock, speed=speeds[controller.limit])) is not None:
        seen.append((change.old, change.new, change.reason))
        if change.reason == S:
            break
    assert seen == moves
    assert controller.limit == moves[-1][1]


def test_a_lower_limit_is_measured_once_the_higher_ones_calls_have_ended():
    """Lowered from 5 to 2 with five calls still running: counting them among the window's
    calls in flight measured 2 at 80 % of 5 (it settled there). The window starts once the
    calls in flight fit the new limit."""
    run, _ = adaptive(max_limit=5, jobs=500, knee=5, noise=0.0, seed=0)
    assert run.limits[-1] == 5
    assert run.limits[250:].count(5) > 0.9 * len(run.limits[250:])


def test_a_window_starts_with_its_first_call_not_with_the_gate():
    """A consumer makes its gate before its first call: the idle time between must not
    lower the first window's tokens/s, the yardstick of the climb (measured low, a second
    call on a server that only queues looked like a gain)."""
    clock = VirtualClock()
    controller = GateController(max_limit=8, clock=clock)
    clock.now += 1.0  # the gate made, no call yet
    change = _window(controller, clock, speed=20.0)
    assert change is not None and (change.old, change.new) == (1, 2)
    assert change.rate == pytest.approx(20.0, rel=0.01)
