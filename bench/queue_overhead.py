"""Queue overhead: drain no-op jobs with one consumer vs a bare psycopg claim/complete loop.

    .venv/bin/python -m bench.queue_overhead [--jobs 5000] [--runs 3]

PostgreSQL, stock configuration. The reference, measured in the same run: one
``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`` transaction and
one completing ``UPDATE`` transaction per job on a bare table (primary key plus the same
partial index as ours). studyqueue drains through ``runconsumer --drain`` with the settings
users get (persistent, health-checked connections; BATCH_SIZE 1) and with BATCH_SIZE 10,
using a handler that completes the job at once (no HTTP). Target: >= 0.4x the loop.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import analyze, reset_tables, setup_django


def reference_loop(jobs: int) -> float:
    """jobs/s of the bare loop on its own connection."""
    import psycopg
    from django.db import connection

    from studyqueue.pg import psycopg_kwargs

    cfg = connection.settings_dict
    with psycopg.connect(**psycopg_kwargs(cfg), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_jobs")
        conn.execute(
            "CREATE TABLE bench_jobs (id bigserial PRIMARY KEY, status text NOT NULL,"
            " attempts int NOT NULL DEFAULT 0)"
        )
        conn.execute("CREATE INDEX bench_jobs_pending ON bench_jobs (id) WHERE status = 'pending'")
        conn.execute(
            "INSERT INTO bench_jobs (status) SELECT 'pending' FROM generate_series(1, %s)", [jobs]
        )
        conn.execute("ANALYZE bench_jobs")
        done = 0
        started = time.perf_counter()
        while True:
            row = conn.execute(
                "UPDATE bench_jobs SET status = 'processing', attempts = attempts + 1"
                " WHERE id = (SELECT id FROM bench_jobs WHERE status = 'pending' ORDER BY id"
                " LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
            ).fetchone()
            if row is None:
                break
            conn.execute("UPDATE bench_jobs SET status = 'completed' WHERE id = %s", [row[0]])
            done += 1
        elapsed = time.perf_counter() - started
        assert done == jobs
        conn.execute("DROP TABLE bench_jobs")
    return jobs / elapsed


def studyqueue_drain(jobs: int, batch_size: int) -> float:
    from django.core.management import call_command

    from studyqueue import queue
    from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob
    from studyqueue.queue import Outcome
    from studyqueue.workers import registry

    async def noop(job, ctx) -> Outcome:  # type: ignore[no-untyped-def]
        return await ctx.db(queue.complete, job)  # type: ignore[no-any-return]

    reset_tables()
    StudyQuestion.objects.bulk_create(StudyQuestion(text=f"q{i}") for i in range(jobs))
    queue.enqueue_many(StudyQuestion.objects.values_list("pk", flat=True))
    analyze()
    real = registry.HANDLERS[JobKind.EXPLANATION]
    registry.HANDLERS[JobKind.EXPLANATION] = noop
    try:
        started = time.perf_counter()
        call_command("runconsumer", "--drain", "--batch-size", str(batch_size), verbosity=0)
        elapsed = time.perf_counter() - started
    finally:
        registry.HANDLERS[JobKind.EXPLANATION] = real
    assert StudyQuestionJob.objects.filter(status="completed").count() == jobs
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    setup_django("postgres")

    rows: dict[str, list[float]] = {"reference": [], "batch 1": [], "batch 10": []}
    for _ in range(args.runs):  # interleaved, so that machine noise hits all alike
        rows["reference"].append(reference_loop(args.jobs))
        rows["batch 1"].append(studyqueue_drain(args.jobs, 1))
        rows["batch 10"].append(studyqueue_drain(args.jobs, 10))
    ref = statistics.median(rows["reference"])
    print(f"jobs={args.jobs} runs={args.runs} (PostgreSQL, one consumer, no-op handler)")
    for name, values in rows.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        label = "psycopg loop" if name == "reference" else f"studyqueue {name}"
        print(f"{label:22} jobs_per_s={median:7.0f} ratio={median / ref:.2f}  runs=[{runs}]")
    print("target: studyqueue batch 1 >= 0.40x the psycopg loop")


if __name__ == "__main__":
    main()
