"""Gate fairness: two consumers share one server at gate 1, each with more jobs than slots.

    python -m bench.gate_fairness [--db sqlite|postgres] [--delay 1] [--seconds 45] [--runs 3]

A backlog against a test LLM server answering in ``delay`` s; ``runconsumer`` as processes of
their own, gate 1: ``first`` starts alone, ``second`` once the first has completed three jobs
(it arrives while the first holds the slot with its next job waiting at its gate). Over the
``seconds`` from the second's start, per consumer: the calls it completed, and its longest
wait for a call (its start or its last completion to its next completion, less one call).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta

from bench.common import ROOT, fill_queue, setup_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    url = setup_django(args.db)

    from django.utils import timezone

    from studyqueue.models import StudyQuestion, StudyQuestionJob
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess(delay=args.delay)
    env = {**os.environ, "DATABASE_URL": url, "STUDYQUEUE_LLM_URL": server.url}
    env |= {"STUDYQUEUE_GATE_PERMITS": "1", "LOG_LEVEL": "WARNING"}
    jobs = StudyQuestionJob.objects.filter(status="completed")

    def consumer(name: str) -> subprocess.Popen:
        command = [sys.executable, "manage.py", "runconsumer", "--worker-id", name]
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)

    print(f"db={args.db} llm_delay_s={args.delay} window_s={args.seconds} gate=1, 2 consumers")
    calls: dict[str, list[int]] = {"first": [], "second": []}
    waits: dict[str, list[float]] = {"first": [], "second": []}
    try:
        for _ in range(args.runs):
            fill_queue(StudyQuestion(text=f"q{i}") for i in range(int(4 * args.seconds)))
            server.reset_stats()
            procs = [consumer("first")]
            while jobs.count() < 3:
                time.sleep(0.05)
            start = timezone.now()
            procs.append(consumer("second"))
            time.sleep(args.seconds)
            end = timezone.now()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=60)
            line = []
            for name in calls:
                done = sorted(
                    jobs.filter(worker_id=name, completed_at__range=(start, end)).values_list(
                        "completed_at", flat=True
                    )
                )
                marks = [start, *done, end]
                longest = max(b - a for a, b in itertools.pairwise(marks))
                wait = max(0.0, (longest - timedelta(seconds=args.delay)).total_seconds())
                calls[name].append(len(done))
                waits[name].append(wait)
                line.append(f"{name}: calls={len(done)} longest_wait_s={wait:.1f}")
            print("run: " + "  ".join(line) + f"  max_calls_at_once={server.stats()['max_active']}")
    finally:
        server.stop()
    for name in calls:
        print(
            f"{name}: calls median={statistics.median(calls[name])} (runs: {calls[name]})"
            f" longest_wait_s median={statistics.median(waits[name]):.1f}"
            f" (runs: {', '.join(f'{w:.1f}' for w in waits[name])})"
        )


if __name__ == "__main__":
    main()
