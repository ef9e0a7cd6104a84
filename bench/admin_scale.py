"""Scale: 1,000,000 job rows on PostgreSQL; admin pages, claim and stale scan timings.

    .venv/bin/python -m bench.admin_scale [--rows 1000000] [--runs 5]

Fills a throwaway database (studyqueue_bench) with a queue that has run for 30 days,
ANALYZEs it, then times (median of --runs, after one warm-up): the job changelist's first
page unfiltered and filtered by status, the dashboard, the question changelist, one claim,
and the stale scan. Targets: pages < 300 ms, claim <= 2 ms, stale scan <= 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import setup_django

TARGETS_MS = {"claim": 2.0, "stale scan": 20.0, "metrics": 100.0}
PAGE_TARGET_MS = 300.0


def fill(rows: int) -> None:
    from django.db import connection

    questions = max(rows // 10, 1000)
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO studyqueue_studyquestion (text, choices, answer, explanation,"
            " created_at, updated_at)"
            " SELECT 'Question ' || g || ': what is ' || g || ' + ' || g || '?', '[]', '',"
            " CASE WHEN g %% 3 = 0 THEN '' ELSE 'Because.' END, now(), now()"
            " FROM generate_series(1, %s) g",
            [questions],
        )
        cur.execute("SELECT min(id) FROM studyqueue_studyquestion")
        first = cur.fetchone()[0]
        # Every job's call wrote a revision (a month of history, in the order the calls
        # ended); the completed jobs point at theirs, as transitions.complete leaves them: the
        # dashboard's hourly figures and the metrics' tokens read the last day's there.
        cur.execute(
            "INSERT INTO studyqueue_explanationrevision (question_id, text, model,"
            " prompt_version, prompt_label, prompt_tokens, completion_tokens, first_token_ms,"
            " tokens_per_second, finish_reason, flags, created_at)"
            " SELECT %s + (g %% %s), 'Because.', 'm', '', '', 40, 200, 300, 25.0, 'stop', '[]',"
            " now() - (%s - g) * (interval '30 days' / %s) + interval '40 seconds'"
            " FROM generate_series(1, %s) g ORDER BY g",
            [first, questions, rows, rows, rows],
        )
        cur.execute("SELECT min(id) FROM studyqueue_explanationrevision")
        first_revision = cur.fetchone()[0]
        # Spread over 30 days; 1 % pending and 0.1 % processing on distinct questions (the
        # one-active-job constraint), 90 % completed, the rest failed or skipped.
        cur.execute(
            "INSERT INTO studyqueue_studyquestionjob (study_question_id, kind, status, attempts,"
            " max_attempts, error_code, error_message, created_at, run_after, started_at,"
            " heartbeat_at, completed_at, worker_id, llm_ms, revision_id)"
            " SELECT %s + (g %% %s), CASE WHEN g %% 50 = 0 THEN 'session_summary'"
            "   ELSE 'explanation' END, s.status, 1, 3,"
            " CASE s.status WHEN 'failed' THEN 'llm_timeout' WHEN 'skipped' THEN"
            "   'operator_skipped' ELSE '' END, '', t.ts, t.ts, t.ts, t.ts,"
            " CASE WHEN s.status IN ('completed', 'failed', 'skipped')"
            "   THEN t.ts + interval '40 seconds' END, 'bench', 1000 + g %% 5000,"
            " CASE WHEN s.status = 'completed' THEN %s + g - 1 END"
            " FROM generate_series(1, %s) g,"
            " LATERAL (SELECT now() - (%s - g) * (interval '30 days' / %s) AS ts) t,"
            " LATERAL (SELECT CASE"
            "   WHEN g > %s - %s THEN 'pending'"
            "   WHEN g > %s - %s - %s THEN 'processing'"
            "   WHEN g %% 100 < 8 THEN 'failed' WHEN g %% 100 < 10 THEN 'skipped'"
            "   ELSE 'completed' END AS status) s",
            [
                first,
                questions,
                first_revision,
                rows,
                rows,
                rows,
                rows,
                rows // 100,
                rows,
                rows // 100,
                rows // 1000,
            ],
        )
        cur.execute("ANALYZE studyqueue_studyquestionjob")
        cur.execute("ANALYZE studyqueue_studyquestion")
        cur.execute("ANALYZE studyqueue_explanationrevision")


def time_ms(fn, runs: int) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    fn()  # warm-up: connection, template and plan caches
    values = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        values.append((time.perf_counter() - started) * 1000)
    return statistics.median(values), values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    setup_django("postgres")

    from django.contrib.auth.models import User
    from django.db import connection, transaction
    from django.test import Client
    from django.utils import timezone

    from studyqueue.models import StudyQuestionJob
    from studyqueue.queue import transitions

    started = time.perf_counter()
    fill(args.rows)
    print(f"rows={StudyQuestionJob.objects.count()} fill_s={time.perf_counter() - started:.1f}")

    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(User.objects.get(username="bench"))

    def get(url: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return run

    def claim_and_roll_back() -> None:
        # Claim inside a transaction rolled back afterwards, so every run claims a job.
        with transaction.atomic():
            assert len(transitions.claim(worker_id="bench", limit=1)) == 1
            transaction.set_rollback(True)

    def readyz() -> None:
        assert client.get("/studyqueue/readyz").status_code == 503  # no consumer, no LLM

    def stale_scan() -> None:
        cutoff = timezone.now() - timezone.timedelta(minutes=10)
        list(StudyQuestionJob.objects.stale(cutoff).values_list("pk", flat=True))

    cases = {
        "job changelist": get("/admin/studyqueue/studyquestionjob/"),
        "job changelist ?status=failed": get(
            "/admin/studyqueue/studyquestionjob/?status__exact=failed"
        ),
        "job changelist ?status=pending": get(
            "/admin/studyqueue/studyquestionjob/?status__exact=pending"
        ),
        "job changelist ?stale=yes": get("/admin/studyqueue/studyquestionjob/?stale=yes"),
        "dashboard": get("/admin/studyqueue/queuedashboard/"),
        "question changelist": get("/admin/studyqueue/studyquestion/"),
        "question changelist ?explanation=outdated": get(
            "/admin/studyqueue/studyquestion/?explanation=outdated"
        ),
        "metrics": get("/studyqueue/metrics"),
        "readyz (db, consumers, LLM: none)": readyz,
        "claim": claim_and_roll_back,
        "stale scan": stale_scan,
    }
    print(f"{'case':34} {'median_ms':>10} {'target_ms':>10}  runs_ms")
    for name, fn in cases.items():
        median, values = time_ms(fn, args.runs)
        target = TARGETS_MS.get(name, PAGE_TARGET_MS)
        ok = "ok" if median <= target else "OVER"
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name:34} {median:10.1f} {target:10.0f}  [{runs}] {ok}")
    connection.close()


if __name__ == "__main__":
    main()
