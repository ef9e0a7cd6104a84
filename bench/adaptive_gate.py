"""GATE_PERMITS=auto against fixed gates (issue 18, item 8).

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
admits them), ``--jobs`` calls per gate.

    .venv/bin/python -m bench.adaptive_gate [--runs 5] [--jobs 400]
    .venv/bin/python -m bench.adaptive_gate --url http://127.0.0.1:18080/v1 --jobs 48
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.common import setup_django

KNEES = (1, 4, 8)
MAX_LIMIT = 8


def simulated(runs: int, jobs: int) -> None:
    from tests.helpers.batching_sim import adaptive, fixed

    print(
        f"simulated batching server, r=20 tokens/s per call, +/-30 % noise, {jobs} jobs, "
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
            gate1 = fixed(1, jobs=jobs, knee=knee, seed=seed)
            fixed_runs = {c: fixed(c, jobs=jobs, knee=knee, seed=seed) for c in range(1, 9)}
            best_limit = max(fixed_runs, key=lambda c: fixed_runs[c].tokens_per_second)
            best = fixed_runs[best_limit]
            run, _ = adaptive(max_limit=MAX_LIMIT, jobs=jobs, knee=knee, seed=seed)
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


async def _real_run(url: str, jobs: int, permits: int | None) -> tuple[float, float, list[int]]:
    from studyqueue.services.gate import LLMGate
    from studyqueue.services.gate_control import GateController
    from studyqueue.services.llm import LLMClient

    controller = GateController(max_limit=MAX_LIMIT) if permits is None else None

    async def run_db(fn, *args):  # type: ignore[no-untyped-def]
        return fn(*args)  # never called: SQLite takes no advisory lock

    gate = LLMGate(url, run_db=run_db, permits=permits or 1, controller=controller, timeout=3600)
    client = LLMClient(
        base_url=url, timeout=600, stall_seconds=600, max_tokens=64, max_connections=MAX_LIMIT
    )
    tokens = 0
    call_seconds = 0.0
    limits: list[int] = []

    async def one(n: int) -> None:
        nonlocal tokens, call_seconds
        messages = [
            {"role": "system", "content": "You explain answers to study questions briefly."},
            {"role": "user", "content": f"Question {n}: why is the sky blue?"},
        ]
        async with gate.slot():
            reply = await client.chat(messages)
            gate.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)
        tokens += reply.completion_tokens or 0
        call_seconds += reply.elapsed_ms / 1000
        limits.append(gate.limit)

    start = time.monotonic()
    try:
        await asyncio.gather(*(one(n) for n in range(jobs)))
    finally:
        await client.aclose()
    wall = time.monotonic() - start
    return tokens / wall, call_seconds / max(tokens, 1), limits


def real(url: str, jobs: int) -> None:
    setup_django("sqlite")
    print(f"real server {url}: {jobs} calls per gate, max_tokens 64")
    results = {}
    for permits in (1, 2, 4, 8, None):
        rate, tpot, limits = asyncio.run(_real_run(url, jobs, permits))
        name = "auto" if permits is None else f"gate {permits}"
        results[name] = rate
        extra = f" limits {limits[:: max(1, len(limits) // 12)]}" if permits is None else ""
        print(f"{name}: {rate:.1f} tokens/s, {tpot * 1000:.1f} ms per output token{extra}")
    best = max((k for k in results if k != "auto"), key=lambda k: results[k])
    print(
        f"best fixed: {best}; auto {results['auto'] / results[best]:.2f}x of it, "
        f"{results['auto'] / results['gate 1']:.2f}x of gate 1"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="seeds (default: %(default)r)")
    parser.add_argument(
        "--jobs", type=int, default=400, help="jobs per gate (default: %(default)r)"
    )
    parser.add_argument("--url", help="a real OpenAI-compatible server instead of the simulation")
    args = parser.parse_args()
    if args.url:
        real(args.url, args.jobs)
    else:
        simulated(args.runs, args.jobs)


if __name__ == "__main__":
    main()
