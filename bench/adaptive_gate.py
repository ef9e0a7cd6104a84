"""GATE_PERMITS=auto against fixed gates.

Default: a batching server simulated on a virtual clock (``tests/helpers/batching_sim``):
total tokens/s ``r * min(c, K)`` shared by the ``c`` calls in flight, each call's speed
+/-30 %, for K = 1, 4, 8; the controller is fed exactly as the gate feeds it. Virtual
time, so hundreds of jobs per gate cost milliseconds and the figures are reproducible
(medians over ``--runs`` seeds). Prints tokens/s of gate 1, of the best fixed gate and of
auto (the whole run, and the 200 jobs after it settled), the jobs auto needed to settle,
time per output token against gate 1, and how many failed calls auto took to halve once
the server answers 503 (a window at 8 is 16 calls).

``--url URL``: the same comparison against a real server (e.g. mlx_lm.server) through the
real ``LLMGate`` and ``LLMClient`` (no job queue: calls are started as fast as the gate
admits them), ``--jobs`` calls per gate; each of ``--runs`` runs goes through the fixed
``--gates`` and auto one after another (so a machine's load drifts over all of them alike),
and the medians are compared. Auto is also measured from the moment it first settled.

``--test-server``: the same real comparison against the suite's test server in a process
of its own (``tests/llm_server.py``), once per ``--knees`` value: a server that generates
``K`` replies at once and queues the rest (``capacity``), each reply ``--delay`` seconds.
K = 1 is a server that gains nothing from a second call; K = 4 one that batches up to 4.
Per gate: the median over runs of tokens/s, and of each run's median time per output token
(a call's wall time over its tokens, queueing at the server included); auto against the best
fixed gate, and against the best of those whose time per token is at most 1.5x gate 1's (the
gate's own rule: more calls that only queue at the server are no gain), and its time per token
against gate 1's.

    .venv/bin/python -m bench.adaptive_gate [--runs 5] [--jobs 400] [--tokens 100]
    .venv/bin/python -m bench.adaptive_gate --url http://127.0.0.1:18080/v1 --jobs 160 --runs 3
    .venv/bin/python -m bench.adaptive_gate --test-server --knees 1,4 --jobs 300 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field

from bench.common import gate_run_db, setup_django

KNEES = (1, 4, 8)
MAX_LIMIT = 8
# The most a call's time per output token may grow over gate 1's for its gate to count.
TPOT_LIMIT = 1.5


def simulated(runs: int, jobs: int, tokens: int = 100) -> None:
    from tests.helpers.batching_sim import adaptive, fixed

    print(
        f"simulated batching server, r=20 tokens/s per call, replies of {tokens} tokens "
        f"({tokens / 20:g} s alone), +/-30 % noise, {jobs} jobs, "
        f"median of {runs} seeds, GATE_MAX_PERMITS={MAX_LIMIT}"
    )
    header = (
        "K",
        "gate 1",
        "best fixed",
        "auto (run)",
        "auto (200 after settling)",
        "x best",
        "settled after",
        "tpot vs gate 1",
    )
    print(" | ".join(header))
    for knee in KNEES:
        rows = []
        for seed in range(runs):
            sim = {"jobs": jobs, "knee": knee, "seed": seed, "tokens": tokens}
            gate1 = fixed(1, **sim)
            fixed_runs = {c: fixed(c, **sim) for c in range(1, 9)}
            best_limit = max(fixed_runs, key=lambda c: fixed_runs[c].tokens_per_second)
            best = fixed_runs[best_limit]
            run, _ = adaptive(max_limit=MAX_LIMIT, **sim)
            settled = run.settled or 0
            steady = run.tokens_per_second_between(settled, settled + 200)
            rows.append(
                (
                    gate1.tokens_per_second,
                    best.tokens_per_second,
                    best_limit,
                    run.tokens_per_second,
                    steady,
                    steady / best.tokens_per_second,
                    settled,
                    run.seconds_per_token / gate1.seconds_per_token,
                )
            )
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(
            f"{knee} | {med[0]:.1f} | {med[1]:.1f} (gate {int(med[2])}) | {med[3]:.1f} "
            f"({med[3] / med[1]:.2f}x) | {med[4]:.1f} | {med[5]:.3f}x | {med[6]:.0f} jobs | "
            f"{med[7]:.2f}x"
        )
    losses = [
        adaptive(max_limit=MAX_LIMIT, jobs=300, knee=8, seed=s, fail_from_job=200)[0]
        for s in range(runs)
    ]
    counts = [r.losses_before_halving for r in losses]
    print(f"503 from job 200 (limit 8, window 16 calls): halved after {counts} failed call(s)")


@dataclass
class RealRun:
    """One gate's calls against a real server."""

    rate: float  # completion tokens/s over the whole run
    seconds_per_token: float
    limits: list[int]  # the limit as each call ended
    settled_rate: float | None = None  # auto: tokens/s of the calls after it first settled
    tpots: list[float] = field(default_factory=list)  # each call's seconds per output token

    @property
    def median_tpot(self) -> float:
        return statistics.median(self.tpots) if self.tpots else 0.0


async def _real_run(url: str, jobs: int, permits: int | None) -> RealRun:
    from studyqueue.services.gate import LLMGate
    from studyqueue.services.gate_control import GateController
    from studyqueue.services.llm import LLMClient

    controller = GateController(max_limit=MAX_LIMIT) if permits is None else None

    gate = LLMGate(
        url, run_db=gate_run_db, permits=permits or 1, controller=controller, timeout=3600
    )
    client = LLMClient(
        base_url=url, timeout=600, stall_seconds=600, max_tokens=64, max_connections=MAX_LIMIT
    )
    tokens = 0
    call_seconds = 0.0
    limits: list[int] = []
    settled_at: float | None = None
    spans: list[tuple[float, float, int]] = []  # each call's start, end and tokens
    tpots: list[float] = []

    async def one(n: int) -> None:
        nonlocal tokens, call_seconds, settled_at
        messages = [
            {"role": "system", "content": "You explain answers to study questions briefly."},
            {"role": "user", "content": f"Question {n}: why is the sky blue?"},
        ]
        async with gate.slot():
            began = time.monotonic()
            reply = await client.chat(messages)
            gate.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)
        tokens += reply.completion_tokens or 0
        call_seconds += reply.elapsed_ms / 1000
        if reply.completion_tokens:
            tpots.append(reply.elapsed_ms / 1000 / reply.completion_tokens)
        limits.append(gate.limit)
        spans.append((began, time.monotonic(), reply.completion_tokens or 0))
        if settled_at is None and controller is not None and not controller.slow_start:
            settled_at = time.monotonic()

    start = time.monotonic()
    try:
        await asyncio.gather(*(one(n) for n in range(jobs)))
    finally:
        await client.aclose()
    end = time.monotonic()
    run = RealRun(tokens / (end - start), call_seconds / max(tokens, 1), limits, tpots=tpots)
    if settled_at is not None and end > settled_at:
        # A call running when it settled counts for its share after that moment.
        after = sum(
            n * (b - max(a, settled_at)) / (b - a) for a, b, n in spans if b > settled_at and b > a
        )
        run.settled_rate = after / (end - settled_at)
    return run


def real(url: str, jobs: int, runs: int, gates: list[int]) -> None:
    setup_django("sqlite")
    print(
        f"real server {url}: {jobs} calls per gate, max_tokens 64, {runs} run(s), each run "
        f"gates {gates} then auto, one after another"
    )
    rates: dict[str, list[float]] = {}
    settled: list[float] = []
    for n in range(runs):
        for permits in [*gates, None]:
            run = asyncio.run(_real_run(url, jobs, permits))
            name = "auto" if permits is None else f"gate {permits}"
            rates.setdefault(name, []).append(run.rate)
            extra = ""
            if permits is None:
                step = max(1, len(run.limits) // 16)
                extra = f", limits {run.limits[::step]}"
                if run.settled_rate is not None:
                    settled.append(run.settled_rate)
                    extra += f", {run.settled_rate:.1f} tokens/s after settling"
            print(
                f"run {n + 1} {name}: {run.rate:.1f} tokens/s, "
                f"{run.seconds_per_token * 1000:.1f} ms per output token{extra}",
                flush=True,
            )
    med = {name: statistics.median(values) for name, values in rates.items()}
    best = max((k for k in med if k != "auto"), key=lambda k: med[k])
    print("medians: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    line = (
        f"best fixed: {best}; auto (whole run, ramp from 1 included) "
        f"{med['auto'] / med[best]:.2f}x of it, {med['auto'] / med['gate 1']:.2f}x of gate 1"
    )
    if settled:
        after = statistics.median(settled)
        line += f"; after settling {after:.1f} tokens/s, {after / med[best]:.2f}x of {best}"
    print(line)


def test_servers(knees: list[int], jobs: int, runs: int, gates: list[int], delay: float) -> None:
    """Fixed gates and auto against the test server at each knee (``capacity``)."""
    from tests.llm_server import LLMServerProcess

    setup_django("sqlite")
    print(
        f"test server (tests/llm_server.py, a process of its own), replies of {delay:g} s, "
        f"{jobs} calls per gate, {runs} run(s), each run gates {gates} then auto, "
        f"GATE_MAX_PERMITS={MAX_LIMIT}"
    )
    header = (
        "K",
        "gate 1",
        "best fixed",
        "best fixed within 1.5x gate 1's ms/token",
        "auto",
        "auto x best",
        "auto x best within",
        "auto after settling",
        "median ms/token: gate 1",
        "auto",
        "auto x gate 1",
        "auto's limits (last run)",
    )
    print(" | ".join(header))
    for knee in knees:
        server = LLMServerProcess(capacity=knee, delay=delay)
        rates: dict[str, list[float]] = {}
        tpots: dict[str, list[float]] = {}
        settled: list[float] = []
        limits: list[int] = []
        try:
            for _ in range(runs):
                for permits in [*gates, None]:
                    run = asyncio.run(_real_run(server.url, jobs, permits))
                    name = "auto" if permits is None else f"gate {permits}"
                    rates.setdefault(name, []).append(run.rate)
                    tpots.setdefault(name, []).append(run.median_tpot)
                    if permits is None:
                        limits = run.limits
                        if run.settled_rate is not None:
                            settled.append(run.settled_rate)
        finally:
            server.stop()
        rate = {k: statistics.median(v) for k, v in rates.items()}
        tpot = {k: statistics.median(v) for k, v in tpots.items()}
        fixed = [k for k in rate if k != "auto"]
        best = max(fixed, key=lambda k: rate[k])
        # The gate's rule: the most tokens/s whose calls take at most 1.5x gate 1's time
        # per token (more calls that only queue at the server are no gain to aim at).
        fair = max(
            (k for k in fixed if tpot[k] <= TPOT_LIMIT * tpot["gate 1"]), key=lambda k: rate[k]
        )
        after = f"{statistics.median(settled):.1f}" if settled else "-"
        step = max(1, len(limits) // 12)
        print(
            f"{knee} | {rate['gate 1']:.1f} | {rate[best]:.1f} ({best}) | "
            f"{rate[fair]:.1f} ({fair}) | {rate['auto']:.1f} | {rate['auto'] / rate[best]:.2f}x | "
            f"{rate['auto'] / rate[fair]:.2f}x | {after} | {tpot['gate 1'] * 1000:.1f} | "
            f"{tpot['auto'] * 1000:.1f} | {tpot['auto'] / tpot['gate 1']:.2f}x | "
            f"{limits[::step]}",
            flush=True,
        )
        print(
            f"  K={knee} medians: "
            + ", ".join(f"{k} {rate[k]:.1f} tokens/s {tpot[k] * 1000:.1f} ms/token" for k in rate),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="seeds (default: %(default)r)")
    parser.add_argument(
        "--jobs", type=int, default=400, help="jobs per gate (default: %(default)r)"
    )
    parser.add_argument(
        "--tokens", type=int, default=100, help="simulated reply length (default: %(default)r)"
    )
    parser.add_argument("--url", help="a real OpenAI-compatible server instead of the simulation")
    parser.add_argument(
        "--gates", default="1,2,4,8", help="fixed gates run against --url (default: %(default)s)"
    )
    parser.add_argument(
        "--test-server",
        action="store_true",
        help="the suite's test server at each of --knees instead of the simulation",
    )
    parser.add_argument(
        "--knees", default="1,4", help="--test-server capacities (default: %(default)s)"
    )
    parser.add_argument(
        "--delay", type=float, default=0.05, help="--test-server reply time (default: %(default)r)"
    )
    args = parser.parse_args()
    if args.test_server:
        gates = [int(g) for g in args.gates.split(",")]
        test_servers(
            [int(k) for k in args.knees.split(",")], args.jobs, args.runs, gates, args.delay
        )
    elif args.url:
        real(args.url, args.jobs, args.runs, [int(g) for g in args.gates.split(",")])
    else:
        simulated(args.runs, args.jobs, args.tokens)


if __name__ == "__main__":
    main()
