"""Bulk enqueue: 100,000 questions -> jobs with enqueue_many.

    .venv/bin/python -m bench.bulk_enqueue [--db postgres|sqlite] [--questions 100000] [--runs 3]

Target: >= 20,000 jobs/s on PostgreSQL.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import setup_django


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    setup_django(args.db)
    from studyqueue.models import StudyQuestion, StudyQuestionJob
    from studyqueue.queue.enqueue import enqueue_many

    StudyQuestion.objects.bulk_create(
        (StudyQuestion(text=f"q{i}") for i in range(args.questions)), batch_size=5000
    )
    ids = list(StudyQuestion.objects.values_list("pk", flat=True))
    rates = []
    for _ in range(args.runs):
        StudyQuestionJob.objects.all().delete()
        started = time.perf_counter()
        created = enqueue_many(ids)
        elapsed = time.perf_counter() - started
        assert created == args.questions, created
        again = enqueue_many(ids[:1000])
        assert again == 0, "enqueue_many must be idempotent"
        rates.append(created / elapsed)
    runs = ", ".join(f"{r:.0f}" for r in rates)
    print(
        f"db={args.db} questions={args.questions} jobs_per_s={statistics.median(rates):.0f}"
        f" runs=[{runs}] target>=20000"
    )


if __name__ == "__main__":
    main()
