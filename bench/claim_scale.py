"""One claim's cost against the size of the tables: does it stay flat as questions grow?

    .venv/bin/python -m bench.claim_scale [--questions 1000000] [--claims 300]

PostgreSQL. Fills the question table (``--questions``) with one finished explanation job
each, and 1 % of them with a pending one (a queue that has run for a while), then times
claims one job at a time, each completed at once: as the consumer sends it (prepared once per
session, planned once for every value) and as any other statement is sent (values inlined,
planned on every call), alternating in rounds. Prints the medians in ms. Target: a claim
<= 2 ms at 1,000,000 questions.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import setup_django


def _fill(questions: int) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO studyqueue_studyquestion"
            " (text, choices, answer, explanation, created_at, updated_at)"
            " SELECT 'q' || g, '[\"1\", \"2\"]', '1', '', now(), now()"
            " FROM generate_series(1, %s) g",
            [questions],
        )
        cur.execute(
            "INSERT INTO studyqueue_studyquestionjob (study_question_id, kind, status, attempts,"
            " max_attempts, error_code, error_message, created_at, run_after, worker_id)"
            " SELECT id, 'explanation', CASE WHEN id % 100 = 0 THEN 'pending' ELSE 'completed'"
            " END, 0, 3, '', '', now(), now(), '' FROM studyqueue_studyquestion"
        )
        cur.execute("ANALYZE")


def _claims(count: int, prepared: bool) -> list[float]:
    from studyqueue.queue import transitions

    times = []
    for _ in range(count):
        started = time.perf_counter()
        (job,) = transitions.claim(worker_id="bench", limit=1, prepared=prepared)
        times.append((time.perf_counter() - started) * 1000)
        transitions.complete(job)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    setup_django("postgres")
    started = time.perf_counter()
    _fill(args.questions)
    print(f"questions={args.questions} filled in {time.perf_counter() - started:.0f} s")
    _claims(20, True), _claims(20, False)  # warm-up, not counted
    runs: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for prepared in (True, False) if round_ % 2 == 0 else (False, True):
            runs[prepared].append(statistics.median(_claims(args.claims, prepared)))
    for prepared, label in ((True, "prepared (as the consumer)"), (False, "planned each call")):
        each = ", ".join(f"{ms:.2f}" for ms in runs[prepared])
        print(f"{label:27} claim_ms={statistics.median(runs[prepared]):.2f}  rounds=[{each}]")
    print("target: a prepared claim <= 2 ms at 1,000,000 questions")


if __name__ == "__main__":
    main()
