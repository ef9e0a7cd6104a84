"""Two LLM servers drained together through one consumer's endpoint pool, against each
measured alone at its best fixed gate.

    python -m bench.endpoint_pool [--jobs 60] [--runs 3] [--delay 0.25] [--knees 4 1]
    python -m bench.endpoint_pool --urls http://127.0.0.1:18090/v1 http://127.0.0.1:18091/v1

Default: two test LLM servers, each in a process of its own, with different knees: a reply
takes ``--delay`` seconds and a server generates at most ``K`` replies at once (the others
queue), so its rate is ``r * min(c, K)`` with ``c`` calls in flight and ``r = 1 / delay``
replies per second per call. Each server is drained alone at every fixed gate from 1 to
``K + 1``; its best is its share. Then both are drained together through ``LLM_ENDPOINTS``,
once at each one's best fixed gate and once with ``GATE_PERMITS=auto`` on both. Every figure
is the median of ``--runs`` runs of ``--jobs`` jobs (``runconsumer --drain``, SQLite), the
configurations taken in turn within each run so that a machine's load drifts over all alike.
Prints jobs/s, and the pool's ratio to the sum of the two best (the target is >= 0.9).

``--urls``: the same against two real servers (e.g. two mlx_lm.server processes from
shared/mlx/); their knees are whatever they are, the fixed gates tried are 1, 2, 4, 8, and
replies are at most 128 tokens.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import fill_queue, setup_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--knees", type=int, nargs=2, default=[4, 1])
    parser.add_argument("--urls", nargs=2, metavar="URL")
    args = parser.parse_args()
    setup_django("sqlite")

    from django.conf import settings
    from django.core.management import call_command

    from studyqueue.models import StudyQuestion, StudyQuestionJob
    from tests.llm_server import LLMServerProcess

    servers: list[Any] = []
    if args.urls:
        urls = list(args.urls)
        gates = [[1, 2, 4, 8], [1, 2, 4, 8]]
        print(f"real servers {urls[0]} and {urls[1]}")
    else:
        servers = [LLMServerProcess(), LLMServerProcess()]
        for server, knee in zip(servers, args.knees, strict=True):
            server.configure(delay=args.delay, capacity=knee)
        urls = [server.url for server in servers]
        gates = [list(range(1, knee + 2)) for knee in args.knees]
        print(
            f"test servers: reply {args.delay:g} s, knees {args.knees[0]} and {args.knees[1]} "
            f"(ideal {args.knees[0] / args.delay:g} and {args.knees[1] / args.delay:g} jobs/s)"
        )
    # Replies of at most 128 tokens (a real server's; the test servers' are fixed).
    base = {
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
        "LLM_TIMEOUT_SECONDS": 120,
        "LLM_MAX_TOKENS": 128,
    }

    def drain(studyqueue: dict[str, Any]) -> float:
        fill_queue(StudyQuestion(text=f"What is {i} + {i}?") for i in range(args.jobs))
        settings.STUDYQUEUE = {**base, **studyqueue}
        started = time.perf_counter()
        call_command("runconsumer", "--drain", verbosity=0)
        elapsed = time.perf_counter() - started
        done = StudyQuestionJob.objects.filter(status="completed").count()
        assert done == args.jobs, f"only {done} of {args.jobs} completed"
        return args.jobs / elapsed

    configs: dict[str, dict[str, Any]] = {}
    for i, url in enumerate(urls):
        for gate in gates[i]:
            configs[f"server {i + 1} alone, gate {gate}"] = {"LLM_URL": url, "GATE_PERMITS": gate}
    configs["pool, auto"] = {
        "LLM_ENDPOINTS": [{"url": url, "gate_permits": "auto"} for url in urls]
    }
    drain(configs[next(iter(configs))])  # warm-up: imports, first connections
    results: dict[str, list[float]] = {name: [] for name in configs}
    best_gates: list[int] = []
    for run in range(args.runs):
        for name, config in configs.items():
            results[name].append(drain(config))
        # The pool at each server's best fixed gate so far (from this run's and earlier ones).
        best_gates = [
            max(gates[i], key=lambda g, i=i: statistics.median(results[_alone(i, g)]))
            for i in range(2)
        ]
        name = "pool, best fixed gates"
        results.setdefault(name, []).append(
            drain(
                {
                    "LLM_ENDPOINTS": [
                        {"url": url, "gate_permits": gate}
                        for url, gate in zip(urls, best_gates, strict=True)
                    ]
                }
            )
        )
        print(f"run {run + 1} of {args.runs} done", flush=True)
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name}: jobs_per_s={medians[name]:.2f} (runs: {runs})")
    best = [medians[_alone(i, g)] for i, g in enumerate(best_gates)]
    total = sum(best)
    print(
        f"best alone: server 1 {best[0]:.2f} (gate {best_gates[0]}), "
        f"server 2 {best[1]:.2f} (gate {best_gates[1]}), sum {total:.2f} jobs/s"
    )
    for name in ("pool, best fixed gates", "pool, auto"):
        print(f"{name}: {medians[name] / total:.2f}x the sum (target >= 0.9)")
    for server in servers:
        server.stop()


def _alone(i: int, gate: int) -> str:
    return f"server {i + 1} alone, gate {gate}"


if __name__ == "__main__":
    main()
