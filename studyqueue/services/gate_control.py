"""The adaptive gate's controller (``GATE_PERMITS=auto``): which concurrency an endpoint
rewards, found from the calls themselves (docs/architecture.md, "The adaptive gate", says how
it climbs, steps back and probes below). Pure: no I/O, time from the clock it is given. Fed
every call that ends or fails with a loss signal and the calls in flight, it answers the
``limit``. It never climbs on a window the backlog could not fill, nor above where the server
says requests wait for it (``server_full``).

Tokens/s of a window is Little's law: the mean calls in flight times the tokens each call
produced per second of its own time; unlike counting completions in a short span, it does
not depend on where the window's edges cut the calls. Its noise is the calls' own spread
(coefficient of variation over the square root of their number), so a window grows with
that spread until its noise is about ``TARGET_NOISE``, and lasts at least
``MIN_WINDOW_SECONDS`` so that it spans several of a batching server's slices.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# A window holds at least this many calls (and two per permit) ...
MIN_WINDOW_CALLS = 8
# ... and more while the calls' spread says its rate is noisier than TARGET_NOISE (on a
# real mlx_lm.server on CPU single calls vary by 30-45 %: ~50 calls), up to MAX_WINDOW_CALLS.
TARGET_NOISE = 0.05
MAX_WINDOW_CALLS = 48
# ... and lasts this long: several of mlx_lm.server's 0.5 s batching slices.
MIN_WINDOW_SECONDS = 2.0
# A rise counts when it exceeds this many standard errors of the two windows (and MIN_RISE).
NOISE_Z = 2.0
MIN_RISE = 0.05
# A step from ``b`` to ``c`` calls pays only when tokens/s grows at least ``(c / b) **
# GAIN_EXPONENT`` times (doubling: +19 %): equivalently, each call's time per token grows
# at most ``(c / b) ** (1 - GAIN_EXPONENT)`` (doubling: 1.68x). A batching server gains far
# more below its knee (doubling: ~2x); a server that only queues gains only the client's
# time between calls (measured: +10 % with two calls on the test server at one slot).
GAIN_EXPONENT = 0.25
# The gate must have been full this share of a window for the window to judge a climb.
FULL_SHARE = 0.8
# Windows held at a limit before climbing again (the server may change).
HOLD_WINDOWS = 20


class Reason:
    """Why the limit changed (the log's ``reason=``)."""

    CLIMB = "climb"
    STEP_BACK = "step_back"
    PROBE_DOWN = "probe_down"  # a climb at its ceiling measures fewer calls
    LOSS = "loss"
    SHARED = "shared"  # another consumer moved the endpoint's limit
    RESTORED = "restored"  # the last good value, stored by an earlier run


@dataclass(frozen=True)
class Change:
    """One change of the limit."""

    old: int
    new: int
    reason: str
    rate: float | None  # tokens/s measured at ``old`` (None: not measured)


@dataclass(frozen=True)
class WindowStats:
    """What one full window measured at ``limit``."""

    limit: int
    rate: float  # completion tokens/s through the gate
    noise: float  # its relative standard error (from the calls' own spread)


class _Window:
    """Calls that started and ended at one limit, and the gate's occupancy meanwhile."""

    def __init__(self, now: float, in_flight: int) -> None:
        self.start = now
        self.changed_at = now
        self.in_flight = in_flight
        self.occupied = 0.0  # integral of calls in flight over time
        self.full = 0.0  # time with the gate full
        self.tokens = 0
        self.seconds = 0.0
        self.speeds: list[float] = []  # tokens per second of each call

    def advance(self, now: float, limit: int) -> None:
        span = max(0.0, now - self.changed_at)
        self.occupied += self.in_flight * span
        if self.in_flight >= limit:
            self.full += span
        self.changed_at = now

    def spread(self) -> float:
        """The coefficient of variation of the calls' speeds."""
        return statistics.pstdev(self.speeds) / statistics.fmean(self.speeds)

    def stats(self, now: float, limit: int) -> tuple[WindowStats, float]:
        """The window's measure and the share of its time the gate was full."""
        elapsed = max(now - self.start, 1e-9)
        mean_in_flight = self.occupied / elapsed
        speed = self.tokens / self.seconds
        noise = self.spread() / math.sqrt(len(self.speeds))
        return WindowStats(limit, mean_in_flight * speed, noise), self.full / elapsed


def _margin(a: WindowStats, b: WindowStats) -> float:
    """The relative difference between two windows' rates that is more than noise."""
    return max(MIN_RISE, NOISE_Z * math.hypot(a.noise, b.noise))


def _good(window: WindowStats, top: WindowStats) -> bool:
    """Whether ``window`` does as well as ``top`` for what it asks: ``top``'s rise over it
    is within the noise, or too small for ``top``'s extra calls."""
    return top.rate <= window.rate * (1 + _needed(window, top))


def _needed(low: WindowStats, high: WindowStats) -> float:
    """The relative rise of tokens/s from ``low`` to ``high`` that makes ``high``'s extra
    calls pay: more than the noise, and at least ``GAIN_EXPONENT``'s share of them."""
    worth = (high.limit / low.limit) ** GAIN_EXPONENT - 1 if high.limit > low.limit else 0.0
    return max(_margin(low, high), worth)


class GateController:
    """The limit of one endpoint, found between 1 and ``max_limit``; one another consumer set
    above ``max_limit`` stays the endpoint's, and this consumer lets ``allowed`` calls through."""

    def __init__(
        self,
        *,
        max_limit: int,
        limit: int = 1,
        rates: Mapping[int, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        min_window_seconds: float = MIN_WINDOW_SECONDS,
        hold_windows: int = HOLD_WINDOWS,
    ) -> None:
        if max_limit < 1:
            raise ValueError("an adaptive gate needs at least one permit")
        self.max_limit = max_limit
        self._limit = min(max(limit, 1), max_limit)
        self.rates: dict[int, float] = {k: v for k, v in (rates or {}).items() if k >= 1}
        self._clock = clock
        self.min_window_seconds = min_window_seconds
        self.hold_windows = hold_windows
        # Doubling until the first climb ends or a loss; a limit restored from an earlier
        # run was already found, so it holds first and then climbs one at a time.
        self.slow_start = limit <= 1 and not self.rates
        # The windows of the climb under way, by limit (empty: holding). Only this climb's:
        # rates measured minutes ago on a shared machine are no yardstick for now.
        self._climb: dict[int, WindowStats] = {}
        self._looked_ahead = False  # this climb already stepped past a flat step
        self._probing_down = False  # this climb measures below where it began ...
        self._probe_from = 1  # ... which was here
        self._hold_left = 0 if self.slow_start else hold_windows
        self._in_flight = 0
        self._last_loss = -math.inf
        self._full_at: int | None = None  # the limit at which the server said it was full
        self._call_seconds = 1.0  # a recent call's length: losses closer than this are one
        self._limit_since = self._clock()
        # Lowered, and more calls in flight than the new limit: until they have ended, a
        # window would count them in its calls in flight (Little's law) beside the speed of
        # the new limit's calls, and measure a lower limit as better than it is.
        self._draining = False
        self._window = _Window(self._limit_since, 0)

    @property
    def limit(self) -> int:
        """The endpoint's limit, shared by every consumer (may exceed ``max_limit``)."""
        return self._limit

    @property
    def allowed(self) -> int:
        """The calls this consumer's gate lets through: the limit, within its own
        ``max_limit`` (another consumer's larger maximum is no reason to lower the limit)."""
        return min(self._limit, self.max_limit)

    @property
    def capped(self) -> bool:
        """The shared limit is above this consumer's maximum: it cannot measure there."""
        return self._limit > self.max_limit

    @property
    def window_calls(self) -> int:
        """Calls the window under way needs (more when its calls' speeds spread)."""
        if len(self._window.speeds) < self._least_calls:
            return self._least_calls
        return self._calls_wanted()

    @property
    def _least_calls(self) -> int:
        return max(MIN_WINDOW_CALLS, 2 * self.allowed)

    def _calls_wanted(self) -> int:
        """The calls the window's spread so far asks for (``TARGET_NOISE``), within bounds."""
        wanted = math.ceil((self._window.spread() / TARGET_NOISE) ** 2)
        return max(self._least_calls, min(MAX_WINDOW_CALLS, wanted))

    def in_flight(self, calls: int) -> None:
        """The gate now holds ``calls`` calls."""
        now = self._clock()
        window = self._window
        if window.occupied == 0 and window.in_flight == 0 and not window.speeds:
            # Nothing has run in this window yet (a gate just made, a backlog just come): it
            # starts with its first call. Counted from before, the idle time would lower
            # its tokens/s, and the first window of a climb is the yardstick of the others.
            window.start = now
        window.advance(now, self.allowed)
        window.in_flight = self._in_flight = calls
        if self._draining and calls <= self.allowed:
            # The calls of the higher limit have ended: the lower one is in force from now.
            self._draining = False
            self._limit_since = now
            self._new_window(now)

    def sample(self, *, tokens: int | None, seconds: float) -> Change | None:
        """A call ended with ``tokens`` completion tokens after ``seconds``."""
        now = self._clock()
        if not tokens or seconds <= 0:
            return None
        self._call_seconds = seconds
        if self._draining or now - seconds < self._limit_since:
            return None  # it began under another limit: its speed belongs to neither
        window = self._window
        window.tokens += tokens
        window.seconds += seconds
        window.speeds.append(tokens / seconds)
        if self.allowed > 1 and now - window.start < self.min_window_seconds:
            # Calls side by side join a batching server's slices at their edges: a window
            # spans several. One call at a time has no slices to span.
            return None
        window.advance(now, self.allowed)
        stats, full = window.stats(now, self.allowed)
        if len(window.speeds) < self.window_calls and not self._judged_early(stats, full):
            return None
        self._new_window(now)
        if full < FULL_SHARE:
            return None  # the backlog did not fill the gate: this says nothing of more
        if self.capped:
            # Measured at its own maximum, below the shared limit: what it would decide
            # (step back to at most its maximum) is for consumers that reach the limit.
            return None
        self.rates[self._limit] = stats.rate
        return self._judge(stats)

    def loss(self) -> Change | None:
        """A call ended in a loss signal: the server is overloaded or unreachable."""
        now = self._clock()
        if now - self._last_loss < self._call_seconds:
            return None  # the same overload seen by calls that were already running
        self._last_loss = now
        self._hold()
        return self._move(max(1, self._limit // 2), Reason.LOSS, now)

    def server_full(self) -> Change | None:
        """The server says requests wait for it (``server_limits``): more calls would only
        queue there. The climb under way ends now, as if its next step had not paid, and
        no climb goes above the limit of now until the next one."""
        self._full_at = self._limit
        return self._settle(self._clock()) if self._climb else None

    def adopt(self, limit: int) -> Change | None:
        """Another consumer set the endpoint's limit: follow it and measure afresh (above
        ``max_limit`` it stays the shared one; this consumer's calls stay within ``allowed``)."""
        limit = max(limit, 1)
        if limit == self._limit:
            return None
        self._hold()
        return self._move(limit, Reason.SHARED, self._clock())

    def restore(self, limit: int, rates: Mapping[int, float]) -> Change | None:
        """Start from a limit found earlier (the stored last good value), not from one."""
        self.rates = {**{k: v for k, v in rates.items() if k >= 1}, **self.rates}
        change = self.adopt(limit)
        if change is None:
            return None
        return Change(change.old, change.new, Reason.RESTORED, self.rates.get(change.new))

    def _judged_early(self, stats: WindowStats, full: float) -> bool:
        """Whether a climb's window can be judged before it is whole: from half its calls on,
        when it beats the climb's best by what a step needs or falls short of it by more than
        the noise. A flat step waits for its whole window (judged sooner, a noisy server's flat
        step and its small real gains look alike). The climb's first window, the yardstick, is
        judged from half the calls it wants: the windows compared with it carry its noise."""
        calls = len(self._window.speeds)
        if full < FULL_SHARE or calls < MIN_WINDOW_CALLS // 2:
            return False
        if not self._climb:
            # Holding, the windows' length is the hold's clock: only a climb's first counts.
            return self._hold_left == 0 and calls >= math.ceil(self._calls_wanted() / 2)
        best = max(self._climb.values(), key=lambda w: w.rate)
        margin = _margin(best, stats)
        return (
            stats.rate > best.rate * (1 + _needed(best, stats))
            or stats.rate * (1 + margin) < best.rate
        )

    def _judge(self, stats: WindowStats) -> Change | None:
        now = self._clock()
        if not self._climb:
            if self._hold_left > 0:
                self._hold_left -= 1
                return None
            self._climb = {stats.limit: stats}
            self._looked_ahead = self._probing_down = False
            self._full_at = None  # a new climb: the server may take more now
            if not self.slow_start and self._limit > 1:
                return self._probe_down(now)
            return self._step_up(now)
        best = max(self._climb.values(), key=lambda w: w.rate)
        self._climb[stats.limit] = stats
        if self._probing_down:
            top = max(self._climb.values(), key=lambda w: w.rate)
            if _good(stats, top):
                if stats.limit > 1:
                    return self._move(max(1, stats.limit // 2), Reason.PROBE_DOWN, now)
                return self._settle(now)
            self._probing_down = False
            if stats.limit == max(1, self._probe_from // 2) and self._probe_from < self._ceiling:
                # Half the calls do worse: the server may take more than where this began.
                return self._move(self._probe_from + 1, Reason.CLIMB, now)
            return self._settle(now)
        if stats.rate > best.rate * (1 + _needed(best, stats)):
            self._looked_ahead = False
            return self._step_up(now)  # it paid: go on
        if not self._looked_ahead:
            # One step that did not pay is no proof: a batching server's gain comes in
            # steps, and one window on a loaded machine can be unlucky. One more to be sure.
            self._looked_ahead = True
            return self._step_up(now)
        return self._settle(now)

    @property
    def _ceiling(self) -> int:
        """The most a climb goes to: the maximum, or where the server said it was full."""
        return min(self.max_limit, self._full_at or self.max_limit)

    def _probe_down(self, now: float) -> Change | None:
        """Measure half the limit: whether fewer calls do as well (a climb that only looked
        upwards kept whatever limit an unlucky window once chose)."""
        self._probing_down, self._probe_from = True, self._limit
        return self._move(max(1, self._limit // 2), Reason.PROBE_DOWN, now)

    def _step_up(self, now: float) -> Change | None:
        if self._limit >= self._ceiling:
            if len(self._climb) == 1 and self._limit > 1:
                # Nothing above to try and nothing below measured: see whether half the
                # calls do as well, or the limit would stay at its ceiling for good.
                return self._probe_down(now)
            return self._settle(now)
        step = self._limit if self.slow_start else 1
        return self._move(min(self.max_limit, self._limit + step), Reason.CLIMB, now)

    def _settle(self, now: float) -> Change | None:
        """End the climb on the lowest limit its best window does not clearly beat (by
        more than the noise and enough for its extra calls, ``_needed``)."""
        top = max(self._climb.values(), key=lambda w: w.rate)
        choice = min(w.limit for w in self._climb.values() if _good(w, top))
        self._hold()
        return self._move(choice, Reason.STEP_BACK, now)

    def _hold(self) -> None:
        self.slow_start = self._probing_down = False
        self._climb = {}
        self._hold_left = self.hold_windows

    def _move(self, limit: int, reason: str, now: float) -> Change | None:
        old = self._limit
        self._new_window(now)
        if limit == old:
            return None
        self._limit = limit
        self._limit_since = now
        self._draining = self._in_flight > self.allowed
        return Change(old, limit, reason, self.rates.get(old))

    def _new_window(self, now: float) -> None:
        self._window = _Window(now, self._in_flight)
