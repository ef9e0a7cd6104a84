"""A batching LLM server on a virtual clock, driving a gate limit: the adaptive gate's
unit tests and ``bench.adaptive_gate`` run the controller against it.

The server's total speed is ``rate * min(c, knee)`` completion tokens/s with ``c`` calls
in flight, shared equally among them (processor sharing, like a batch decoder); each call
needs ``tokens`` tokens of work times a factor drawn in ``1 +/- noise``, so the speed one
call sees varies by that much. From ``fail_from_job`` on, every call fails at once (a 503).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from studyqueue.services.gate_control import GateController


class VirtualClock:
    """Seconds that advance only when the simulation says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """What a simulated backlog went through."""

    jobs: int = 0
    tokens: int = 0
    seconds: float = 0.0  # virtual time to drain it
    call_seconds: float = 0.0  # sum of every call's wall time
    limits: list[int] = field(default_factory=list)  # the limit as each job ended
    ends: list[float] = field(default_factory=list)  # when each job ended
    settled: int | None = None  # jobs until the controller first held a limit
    losses_before_halving: int | None = None  # failed calls until the limit halved

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def seconds_per_token(self) -> float:
        return self.call_seconds / self.tokens if self.tokens else 0.0

    def tokens_per_second_between(self, first: int, last: int) -> float:
        """Tokens/s of jobs ``first + 1`` to ``last`` (all of the same size)."""
        last = min(last, len(self.ends))
        begin = self.ends[first - 1] if first else 0.0
        span = self.ends[last - 1] - begin
        return (last - first) * self.tokens / self.jobs / span if span > 0 else 0.0


@dataclass
class _Call:
    started: float
    work: float  # tokens of work left (the noise already applied)
    tokens: int


def simulate(
    limit_of: Callable[[], int],
    controller: GateController | None,
    clock: VirtualClock,
    *,
    jobs: int,
    knee: int,
    rate: float = 20.0,
    tokens: int = 100,
    noise: float = 0.3,
    seed: int = 0,
    fail_from_job: int | None = None,
) -> Run:
    """Drain ``jobs`` calls through a gate whose limit ``limit_of()`` reads; the controller
    (None: a fixed gate) is fed each call as the real gate feeds it."""
    rng = random.Random(seed)
    run = Run()
    running: list[_Call] = []
    started = 0
    start_time = clock.now
    limit_at_failure: int | None = None
    failed = 0
    while run.jobs < jobs:
        while started < jobs and len(running) < limit_of():
            factor = 1 + rng.uniform(-noise, noise)
            running.append(_Call(clock.now, tokens * factor, tokens))
            started += 1
            if controller is not None:
                controller.in_flight(len(running))
        failing = fail_from_job is not None and run.jobs >= fail_from_job
        if failing:
            if limit_at_failure is None:
                limit_at_failure = limit_of()
            running.pop(0)  # a 503 answers at once
            clock.now += 0.001
            run.jobs += 1
            failed += 1
            if controller is not None:
                controller.in_flight(len(running))
                controller.loss()
            run.limits.append(limit_of())
            run.ends.append(clock.now - start_time)
            if run.losses_before_halving is None and limit_of() < limit_at_failure:
                run.losses_before_halving = failed
            continue
        speed = rate * min(len(running), knee) / len(running)  # tokens/s for each call
        call = min(running, key=lambda c: c.work)
        step = call.work / speed
        clock.now += step
        for other in running:
            other.work -= speed * step
        running.remove(call)
        elapsed = clock.now - call.started
        run.jobs += 1
        run.tokens += call.tokens
        run.call_seconds += elapsed
        if controller is not None:
            controller.in_flight(len(running))
            controller.sample(tokens=call.tokens, seconds=elapsed)
        run.limits.append(limit_of())
        run.ends.append(clock.now - start_time)
        if run.settled is None and controller is not None and not controller.slow_start:
            run.settled = run.jobs
    run.seconds = clock.now - start_time
    return run


def fixed(limit: int, **kwargs: object) -> Run:
    """A fixed gate of ``limit`` through the same simulation."""
    return simulate(lambda: limit, None, VirtualClock(), **kwargs)  # type: ignore[arg-type]


def adaptive(max_limit: int = 8, **kwargs: object) -> tuple[Run, GateController]:
    """``GATE_PERMITS=auto`` through the same simulation."""
    clock = VirtualClock()
    controller = GateController(max_limit=max_limit, clock=clock)
    run = simulate(lambda: controller.allowed, controller, clock, **kwargs)  # type: ignore[arg-type]
    return run, controller
