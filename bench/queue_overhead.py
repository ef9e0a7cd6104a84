"""Queue overhead: drain no-op jobs with one consumer vs a bare psycopg claim/complete loop.

    .venv/bin/python -m bench.queue_overhead [--jobs 5000] [--runs 3]

PostgreSQL, stock configuration. The reference, measured in the same run: one
``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`` transaction and
one completing ``UPDATE`` transaction per job on a bare table (primary key plus the same
partial index as ours). studyqueue drains through ``runconsumer --drain`` with the settings
users get (persistent, health-checked connections; BATCH_SIZE 1) and with BATCH_SIZE 10,
using a handler that completes the job at once (no HTTP). Targets: >= 0.30x the loop at
batch 1, >= 0.45x at batch 10.

A third loop, "studyqueue's SQL", sends studyqueue's own two statements per job (the claim
and the finish, as the consumer's ``queue.claim`` and ``queue.complete`` send them: the claim
prepared once on the connection, then executed; captured through
Django's ``execute_wrapper``) from the same bare psycopg loop to the studyqueue tables: no
ORM, no threads, no event loop. It is the ceiling of any consumer that keeps those
statements, and tells the database's share of the gap from the consumer's.

The machine is shared and its speed drifts within minutes, so the figure is a paired one:
after an untimed warm-up round (imports, first connections, the planner's caches), each
round runs the loop and studyqueue back to back, alternating which goes first, and the
ratio printed is the median of the rounds' own ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import fill_queue, setup_django


def reference_loop(jobs: int) -> float:
    """jobs/s of the bare loop on its own connection."""
    import psycopg
    from django.db import connection

    from studyqueue.queue.pg import psycopg_kwargs

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


def _fill(jobs: int) -> None:
    from studyqueue.models import StudyQuestion

    fill_queue(StudyQuestion(text=f"q{i}") for i in range(jobs))


def statements_loop(jobs: int) -> float:
    """jobs/s of the bare loop sending studyqueue's claim and finish statements."""
    import psycopg
    from django.db import connection
    from django.utils import timezone

    from studyqueue.queue import transitions
    from studyqueue.queue.pg import psycopg_kwargs

    _fill(jobs + 1)
    sent: list[tuple[str, dict[str, Any]]] = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append((sql, params))
        return execute(sql, params, many, context)

    connection.close()  # a new session, which prepares the claim: its PREPARE is captured
    with connection.execute_wrapper(capture):  # one job, to learn the statements
        transitions.complete(transitions.claim(worker_id="bench", limit=1, prepared=True)[0])
    *setup, (claim_sql, claim_params), (finish_sql, finish_params) = sent
    # Parameters bound by psycopg on the client, as Django's backend binds them.
    kwargs = psycopg_kwargs(connection.settings_dict)
    with psycopg.connect(**kwargs, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        for sql, params in setup:  # the session's PREPARE of the claim, as the consumer's
            conn.execute(sql, params)
        done = 0
        started = time.perf_counter()
        while True:
            claim = {**claim_params, "token": uuid.uuid4(), "now": timezone.now()}
            cursor = conn.execute(claim_sql, claim)
            row = cursor.fetchone()
            if row is None:
                break
            job_id = row[[c.name for c in cursor.description].index("id")]
            conn.execute(
                finish_sql, {**finish_params, "fence_id": job_id, "fence_token": claim["token"]}
            )
            done += 1
        elapsed = time.perf_counter() - started
    assert done == jobs
    return jobs / elapsed


def studyqueue_drain(jobs: int, batch_size: int) -> float:
    from dataclasses import replace

    from django.core.management import call_command

    from studyqueue.models import KIND_SPECS, JobKind, StudyQuestionJob, register_kind
    from studyqueue.queue import transitions
    from studyqueue.queue.transitions import Outcome

    class Done:
        def write(self, job) -> Outcome:  # type: ignore[no-untyped-def]
            return transitions.complete(job)

    async def noop(job, ctx) -> Done:  # type: ignore[no-untyped-def]
        return Done()

    _fill(jobs)
    real = KIND_SPECS[JobKind.EXPLANATION]
    register_kind(replace(real, handler=noop))
    try:
        started = time.perf_counter()
        call_command("runconsumer", "--drain", "--batch-size", str(batch_size), verbosity=0)
        elapsed = time.perf_counter() - started
    finally:
        register_kind(real)
    assert StudyQuestionJob.objects.filter(status="completed").count() == jobs
    return jobs / elapsed


LABELS = {"SQL": "studyqueue's SQL"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup-jobs", type=int, default=500)
    args = parser.parse_args()
    setup_django("postgres")

    contenders: dict[str, Callable[[int], float]] = {
        "SQL": statements_loop,
        "batch 1": lambda jobs: studyqueue_drain(jobs, 1),
        "batch 10": lambda jobs: studyqueue_drain(jobs, 10),
    }
    for run in (reference_loop, *contenders.values()):
        run(args.warmup_jobs)  # warm-up, not counted
    rows: dict[str, list[float]] = {"reference": [], **{name: [] for name in contenders}}
    ratios: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(args.runs):
        for name, run in contenders.items():
            # A pair, back to back, the loop first in one round and last in the next, so
            # that the machine's drift hits both alike.
            if round_ % 2 == 0:
                ref, ours = reference_loop(args.jobs), run(args.jobs)
            else:
                ours, ref = run(args.jobs), reference_loop(args.jobs)
            rows["reference"].append(ref)
            rows[name].append(ours)
            ratios[name].append(ours / ref)
    print(
        f"jobs={args.jobs} runs={args.runs} (PostgreSQL, one consumer, no-op handler;"
        " each run paired with a loop run, after a warm-up)"
    )
    for name, values in rows.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        if name == "reference":
            print(f"{'psycopg loop':22} jobs_per_s={median:7.0f}  runs=[{runs}]")
            continue
        ratio = statistics.median(ratios[name])
        each = ", ".join(f"{r:.2f}" for r in ratios[name])
        label = LABELS.get(name, f"studyqueue {name}")
        print(
            f"{label:22} jobs_per_s={median:7.0f} ratio={ratio:.2f} (paired: {each})  runs=[{runs}]"
        )
    print("targets: studyqueue batch 1 >= 0.30x, batch 10 >= 0.45x the psycopg loop (medians)")


if __name__ == "__main__":
    main()
