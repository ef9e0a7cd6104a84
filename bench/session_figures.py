"""A session's figures at scale: 10,000 learners with two sessions of 50 answers each
(1,000,000 answers over 2,000 tagged questions, each answered 500 times), then the time of
``figures.of`` for one learner's second session (the learner's past, the tags, the cohort's
difficulty and slow answers), median of several runs, on PostgreSQL (``BENCH_PG_URL``).

    python -m bench.session_figures [--learners 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import time

from bench.common import analyze, median_of, reset_tables, setup_django

QUESTIONS, TAGS, ANSWERS = 2000, 10, 50


def _fill(learners: int) -> None:
    """The questions with their tags, then every learner's two sessions and their answers,
    written by INSERT … SELECT (a million rows through the ORM would take minutes)."""
    from django.db import connection

    from studyqueue.models import SessionAnswer, StudyQuestion, StudySession, Tag

    reset_tables()
    StudySession.objects.all().delete()
    Tag.objects.all().delete()
    tags = Tag.objects.bulk_create(Tag(name=f"tag-{t}") for t in range(TAGS))
    questions = StudyQuestion.objects.bulk_create(
        StudyQuestion(external_id=f"q-{i}", text=f"문항 {i}", choices=list("ABCD"), answer="1")
        for i in range(QUESTIONS)
    )
    links = StudyQuestion.tags.through
    links.objects.bulk_create(
        links(studyquestion_id=q.pk, tag_id=tags[i % TAGS].pk) for i, q in enumerate(questions)
    )
    first = questions[0].pk
    sessions, answers = StudySession._meta.db_table, SessionAnswer._meta.db_table
    with connection.cursor() as cursor:
        # Session n: learner n mod L, its first (n < L) or second sitting, four days apart.
        cursor.execute(
            f'INSERT INTO {sessions} (id, learner, started_at, ended_at, "right", total,'
            " fingerprint, recorded_at) SELECT n + 1, 'learner-' || (n %% %(l)s),"
            " %(at)s::timestamptz + (n / %(l)s) * interval '4 days',"
            " %(at)s::timestamptz + (n / %(l)s) * interval '4 days' + interval '20 minutes',"
            f" 0, {ANSWERS}, '', %(at)s::timestamptz"
            " FROM generate_series(0, 2 * %(l)s - 1) AS s(n)",
            {"l": learners, "at": "2026-12-01 09:00+09"},
        )
        # Answer p of session n: question (7n + 40p) mod Q, right 70 % of the time.
        cursor.execute(
            f"INSERT INTO {answers} (session_id, position, question_id, question_text, choices,"
            f" chosen, key, correct, seconds) SELECT n / {ANSWERS} + 1, n %% {ANSWERS} + 1,"
            " %(first)s + q, '문항 ' || q, '[\"A\", \"B\", \"C\", \"D\"]', '1', '1',"
            " random() < 0.7, 5 + floor(random() * 60)"
            f" FROM (SELECT n, (7 * (n / {ANSWERS}) + 40 * (n %% {ANSWERS})) %% {QUESTIONS} AS q"
            f" FROM generate_series(0, 2 * %(l)s * {ANSWERS} - 1) AS s(n)) AS a",
            {"first": first, "l": learners},
        )
    analyze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    setup_django("postgres")
    from studyqueue.models import SessionAnswer, StudySession
    from studyqueue.sessions import figures, summaries

    started = time.perf_counter()
    _fill(args.learners)
    print(
        f"filled: {SessionAnswer.objects.count():,} answers, {args.learners:,} learners "
        f"in {time.perf_counter() - started:.1f} s"
    )
    session = StudySession.objects.get(pk=args.learners + 1)  # learner-0's second session

    def once() -> float:
        began = time.perf_counter()
        answers = summaries.scored(summaries.answers_of(session))
        found = figures.of(session, answers)
        took = (time.perf_counter() - began) * 1000
        assert found["total"] == ANSWERS and len(found["difficulty"]) == ANSWERS
        return took

    once()  # warm: the connection, the plans' caches
    median, values = median_of(args.runs, once)
    shown = ", ".join(f"{v:.1f}" for v in values)
    print(f"figures of a {ANSWERS}-answer session: median {median:.1f} ms ({shown}); target 100")


if __name__ == "__main__":
    main()
