"""Drain rate: a backlog against a test LLM that answers in a fixed time, gate 1 and gate 4.

    python -m bench.drain_rate [--db sqlite|postgres] [--jobs 200] [--delay 0.05] [--runs 3]

Prints jobs/s per run, the median, the ratio to the ideal (1 / delay per permit), the
LLM busy share (the share of the time from the first request to the last reply during
which the server was generating: a GPU's utilisation), the most calls it ever served at
once, and, for gate 1, its idle time between two calls as the server itself saw it
(reply finished -> next request line read): the consumer's own cost per job.

The test LLM server runs in a process of its own, like a real one (in-process, it would
share the consumer's GIL). It answers ``delay`` after it reads a request line, so its own
parsing is not billed to the consumer. One untimed warm-up run (imports, first
connections) precedes the timed ones.

``--as-user``: the drain as a user runs it, which the default leaves out: questions with
choices and a key (so every check runs after each explanation: key audit, verifier, step
check), ``manage.py enqueue --missing`` and ``manage.py runconsumer --drain`` as processes of
their own with the default settings and log level (INFO, its lines read through a pipe).
Prints the busy share, the server's idle time between calls and the time per job (the
drain's wall time, from the process's start, over every job it ran).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from bench.common import fill_queue, median_of, setup_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--permits", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--as-user", action="store_true", help="processes, default settings")
    args = parser.parse_args()
    if args.delay <= 0 and not args.as_user:  # the ideal rate is permits / delay
        parser.error("--delay must be above 0 (--as-user takes 0: an instant server)")
    url = setup_django(args.db)
    if args.as_user:
        as_user(args, url)
        return

    from django.conf import settings
    from django.core.management import call_command

    from studyqueue.models import StudyQuestion, StudyQuestionJob
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess()
    gaps: dict[int, list[float]] = {}
    busy: dict[int, list[float]] = {}
    peak: dict[int, int] = {}

    def one_run(permits: int) -> float:
        fill_queue(StudyQuestion(text=f"q{i}") for i in range(args.jobs))
        server.configure(delay=args.delay, capacity=permits)
        server.reset_stats()
        settings.STUDYQUEUE = {
            "LLM_URL": server.url,
            "GATE_PERMITS": permits,
            "BATCH_SIZE": permits,
        }
        started = time.perf_counter()
        call_command("runconsumer", "--drain", verbosity=0)
        elapsed = time.perf_counter() - started
        done = StudyQuestionJob.objects.filter(status="completed").count()
        assert done == args.jobs, f"only {done} of {args.jobs} completed"
        gaps.setdefault(permits, []).extend(server.idle_gaps_ms())
        busy.setdefault(permits, []).append(server.busy_share())
        peak[permits] = max(peak.get(permits, 0), server.stats()["max_active"])
        return args.jobs / elapsed

    print(f"db={args.db} jobs={args.jobs} llm_delay_s={args.delay} runs={args.runs}")
    medians = {}
    for permits in args.permits:
        one_run(permits)  # warm-up, not counted
        gaps.pop(permits, None)
        busy.pop(permits, None)
        median, values = median_of(args.runs, lambda p=permits: one_run(p))
        medians[permits] = median
        ideal = permits / args.delay
        wall = args.jobs / median
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"gate={permits} jobs_per_s={median:.2f} (runs: {runs})"
            f" ideal={ideal:.1f} ratio_to_ideal={median / ideal:.3f}"
            f" wall_s={wall:.2f} wall_vs_ideal={wall / (args.jobs / ideal):.3f}"
            f" busy_share={statistics.median(busy[permits]):.3f}"
            f" (runs: {', '.join(f'{b:.3f}' for b in busy[permits])})"
            f" max_calls_at_once={peak[permits]}"
        )
        if permits == 1 and gaps.get(1):
            idle = sorted(gaps[1])
            print(
                f"gate=1 llm_idle_between_calls_ms p50={statistics.median(idle):.2f}"
                f" p90={idle[int(len(idle) * 0.9)]:.2f} (as seen by the server)"
            )
    if 1 in medians:
        target = 0.99 if args.delay >= 1 else 0.95
        print(f"target: gate=1 busy_share >= {target} and max_calls_at_once == 1")
    if 1 in medians and len(medians) > 1:
        for permits, value in medians.items():
            if permits != 1:
                print(
                    f"speedup gate={permits} vs gate=1: {value / medians[1]:.2f}x"
                    f" (target >= {0.875 * permits:.1f}x)"
                )
    server.stop()


def as_user(args: argparse.Namespace, url: str) -> None:
    """The drain the way a user runs it (``--as-user``), gate 1."""
    from bench.common import reset_tables
    from studyqueue.models import StudyQuestion, StudyQuestionJob
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess()
    server.configure(delay=args.delay, capacity=1)
    env = {**os.environ, "DATABASE_URL": url, "STUDYQUEUE_LLM_URL": server.url}
    env.pop("LOG_LEVEL", None)  # the default, INFO
    manage = [sys.executable, "manage.py"]
    busy, gaps, per_job = [], [], []
    print(f"as a user: db={args.db} questions={args.jobs} llm_delay_s={args.delay} gate=1")
    for _ in range(args.runs):
        reset_tables()
        StudyQuestion.objects.bulk_create(
            StudyQuestion(text=f"What is 2 + 2? ({i})", choices=["3", "4"], answer="4")
            for i in range(args.jobs)
        )
        subprocess.run([*manage, "enqueue", "--missing"], env=env, check=True)
        server.reset_stats()
        started = time.perf_counter()
        # Its log read through a pipe, as a terminal or a service manager does.
        subprocess.run(
            [*manage, "runconsumer", "--drain"], env=env, check=True, capture_output=True
        )
        elapsed = time.perf_counter() - started
        jobs = StudyQuestionJob.objects.filter(status="completed").count()
        busy.append(server.busy_share())
        gaps.append(statistics.median(server.idle_gaps_ms()))
        per_job.append(elapsed * 1000 / jobs)
        print(f"run: jobs={jobs} wall_s={elapsed:.2f} busy_share={busy[-1]:.3f}")
    print(
        f"busy_share={statistics.median(busy):.3f} llm_idle_between_calls_ms_p50="
        f"{statistics.median(gaps):.2f} ms_per_job={statistics.median(per_job):.2f}"
        f" (medians of {args.runs})"
    )
    server.stop()


if __name__ == "__main__":
    main()
