"""PostgreSQL: the claim query and the stale scan use their partial indexes at scale."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.utils import timezone

from studyqueue.models import StudyQuestionJob
from studyqueue.queue import sql, transitions

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.slow]

N_JOBS = 100_000


def _fill() -> None:
    """100,000 jobs as a queue that has run for a while: mostly finished, a few active."""
    job = connection.ops.quote_name(StudyQuestionJob._meta.db_table)
    question = connection.ops.quote_name("studyqueue_studyquestion")
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {question} (text, choices, answer, explanation, created_at, updated_at)"
            " SELECT 'q' || g, '[]', '', '', now(), now()"
            " FROM generate_series(1, 2000) g"
        )
        cur.execute(f"SELECT min(id) FROM {question}")
        first = cur.fetchone()[0]
        # 1 % pending, 1 % processing (distinct questions), the rest finished.
        cur.execute(
            f"INSERT INTO {job} (study_question_id, kind, status, attempts, max_attempts,"
            " error_code, error_message, created_at, run_after, heartbeat_at, worker_id)"
            " SELECT %s + (g %% 2000), 'explanation',"
            " CASE WHEN g <= 1000 THEN 'pending' WHEN g <= 2000 THEN 'processing'"
            "      WHEN g %% 10 = 0 THEN 'failed' ELSE 'completed' END,"
            " 1, 3, '', '', now(), now(), CASE WHEN g > 1000 AND g <= 2000 THEN now() END, ''"
            " FROM generate_series(1, %s) g",
            [first, N_JOBS],
        )
        cur.execute(f"ANALYZE {job}")
        cur.execute(f"ANALYZE {question}")


def _plan(sql: str, params: dict) -> str:
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cur.fetchall())


def test_claim_and_stale_scan_use_partial_indexes():
    _fill()
    assert StudyQuestionJob.objects.count() == N_JOBS
    claim_sql = sql.claim("postgresql", limit=1)
    # With KEY_AUDIT_HOLDS off and on, and with deliveries (notices) left out.
    for holds, deliveries in ((False, True), (True, True), (False, False)):
        params = {"token": None, "worker_id": "w", "now": timezone.now()}
        params.update(holds=holds, deliveries=deliveries)
        # EXPLAIN plans the UPDATE without running it: planned for these values, and as the
        # consumer runs it, prepared and planned once for every value.
        prepared = sql.run_prepared(connection.alias, claim_sql, partial(_plan, params=params))
        for claim_plan in (_plan(claim_sql, params), prepared):
            print(claim_plan)
            assert "studyqueue_job_claim" in claim_plan
            # Neither the job table nor the question table is read whole (the pause table has
            # a row per paused kind): a disputed key's hold reads the partial index of held ones.
            assert "Seq Scan on studyqueue_studyquestionjob" not in claim_plan
            assert "Seq Scan on studyqueue_studyquestion " not in claim_plan
        assert "run_after <= $" in prepared, "the prepared claim's plan is generic"
    # "Is any job ready" (the poller asks every second) reads an index of the pending jobs.
    ready_plan = _plan(sql.claimable_jobs(due=True, limit=1), params)
    print(ready_plan)
    assert "studyqueue_job_claim" in ready_plan or "studyqueue_job_status_id" in ready_plan
    assert "studyqueue_studyquestionjob_pkey" not in ready_plan.splitlines()[1]
    stale_plan = StudyQuestionJob.objects.stale(timezone.now() - timedelta(minutes=10)).explain()
    print(stale_plan)
    assert "studyqueue_job_stale" in stale_plan
    # And the claim itself works on this table.
    (job,) = transitions.claim(worker_id="w", limit=1)
    assert job.attempts == 2
