"""Every transition of the job state machine, including the refused ones."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from studyqueue.exceptions import EnqueueError
from studyqueue.models import ErrorCode, JobKind, JobStatus, StudyQuestionJob
from studyqueue.queue import pauses, transitions
from studyqueue.queue.enqueue import enqueue, enqueue_many
from studyqueue.queue.operations import refusals, retry_ended, skip
from studyqueue.queue.pauses import paused_kinds, resume
from studyqueue.queue.transitions import Outcome
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)

pytestmark = pytest.mark.django_db


def make_stale(job: StudyQuestionJob, minutes: float = 60) -> None:
    """Age a job's heartbeat as if its worker died ``minutes`` ago (test set-up only)."""
    StudyQuestionJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(minutes=minutes)
    )


def claim_one(worker: str = "w1") -> StudyQuestionJob:
    jobs = transitions.claim(worker_id=worker, limit=1)
    assert len(jobs) == 1
    return jobs[0]


# --------------------------------------------------------------------------- enqueue


def test_enqueue_creates_a_pending_job():
    question = StudyQuestionFactory()
    result = enqueue(question)
    assert result.created
    job = StudyQuestionJob.objects.get()
    assert job == result.job
    assert (job.status, job.kind, job.attempts, job.max_attempts) == (
        "pending",
        "explanation",
        0,
        3,
    )
    assert job.run_after <= timezone.now()


def test_enqueue_is_idempotent_while_a_job_is_active():
    question = StudyQuestionFactory()
    first = enqueue(question)
    second = enqueue(question.pk)
    assert not second.created
    assert second.job.pk == first.job.pk
    claim_one()
    third = enqueue(question)
    assert not third.created and third.job.pk == first.job.pk
    assert StudyQuestionJob.objects.count() == 1


def test_enqueue_after_the_job_finished_creates_a_new_one():
    question = StudyQuestionFactory()
    enqueue(question)
    assert transitions.complete(claim_one()) == Outcome.COMPLETED
    again = enqueue(question)
    assert again.created
    assert StudyQuestionJob.objects.count() == 2


def test_enqueue_kinds_are_independent():
    question = StudyQuestionFactory()
    assert enqueue(question, JobKind.EXPLANATION).created
    assert enqueue(question, JobKind.KEY_AUDIT).created


def test_enqueue_rejects_unknown_kind_and_missing_question():
    question = StudyQuestionFactory()
    with pytest.raises(EnqueueError, match="unknown job kind 'poem'"):
        enqueue(question, "poem")
    with pytest.raises(EnqueueError, match="belong to a question set or a study session"):
        enqueue(question, JobKind.SESSION_SUMMARY)
    with pytest.raises(EnqueueError, match="study question 999999 does not exist"):
        enqueue(999999)
    assert not StudyQuestionJob.objects.exists()


@override_settings(STUDYQUEUE={"MAX_ATTEMPTS": 5})
def test_enqueue_takes_max_attempts_from_settings():
    assert enqueue(StudyQuestionFactory()).job.max_attempts == 5


def test_enqueue_many_is_conflict_safe_and_counts_created():
    questions = StudyQuestionFactory.create_batch(5)
    ids = [q.pk for q in questions]
    enqueue(questions[0])
    created = enqueue_many([*ids, ids[1], 987654])  # a duplicate and a missing id
    assert created == 4
    assert enqueue_many(ids) == 0
    assert StudyQuestionJob.objects.filter(status="pending").count() == 5
    job = StudyQuestionJob.objects.get(study_question=questions[2])
    assert (job.attempts, job.max_attempts, job.error_code) == (0, 3, "")


def test_enqueue_many_rejects_unknown_kind():
    with pytest.raises(EnqueueError):
        enqueue_many([StudyQuestionFactory().pk], "nope")


# --------------------------------------------------------------------------- claim


def test_claim_takes_ready_jobs_in_id_order_and_counts_the_attempt():
    jobs = [enqueue(q).job for q in StudyQuestionFactory.create_batch(3)]
    claimed = transitions.claim(worker_id="host:1", limit=2)
    assert [j.pk for j in claimed] == [jobs[0].pk, jobs[1].pk]
    for job in claimed:
        assert job.status == JobStatus.PROCESSING
        assert job.attempts == 1
        assert job.claim_token is not None
        assert job.worker_id == "host:1"
        assert job.started_at is not None and job.heartbeat_at is not None
        job.refresh_from_db()
        assert job.status == JobStatus.PROCESSING and job.attempts == 1
    assert claimed[0].claim_token == claimed[1].claim_token
    assert StudyQuestionJob.objects.get(pk=jobs[2].pk).status == JobStatus.PENDING


def test_claim_claims_exactly_limit_rows():
    for q in StudyQuestionFactory.create_batch(4):
        enqueue(q)
    assert len(transitions.claim(worker_id="w", limit=1)) == 1
    assert StudyQuestionJob.objects.filter(status="processing").count() == 1


def test_claim_uses_batch_size_setting():
    for q in StudyQuestionFactory.create_batch(4):
        enqueue(q)
    assert len(transitions.claim(worker_id="w")) == 1
    with override_settings(STUDYQUEUE={"BATCH_SIZE": 2}):
        assert len(transitions.claim(worker_id="w")) == 2


def test_claim_skips_future_and_exhausted_jobs():
    future = StudyQuestionJobFactory(run_after=timezone.now() + timedelta(hours=1))
    exhausted = StudyQuestionJobFactory(attempts=3, max_attempts=3)
    assert transitions.claim(worker_id="w", limit=10) == []
    ready = StudyQuestionJobFactory()
    assert [j.pk for j in transitions.claim(worker_id="w", limit=10)] == [ready.pk]
    future.refresh_from_db()
    exhausted.refresh_from_db()
    assert future.status == exhausted.status == JobStatus.PENDING


def test_claim_with_nothing_ready_or_zero_limit():
    assert transitions.claim(worker_id="w") == []
    StudyQuestionJobFactory()
    assert transitions.claim(worker_id="w", limit=0) == []


# --------------------------------------------------------------------------- fenced writes


def test_heartbeat_is_fenced():
    StudyQuestionJobFactory()
    job = claim_one()
    before = job.heartbeat_at
    assert transitions.heartbeat(job)
    job.refresh_from_db()
    assert job.heartbeat_at >= before
    transitions.complete(job)
    assert not transitions.heartbeat(job)


def test_complete_records_metrics():
    StudyQuestionJobFactory()
    job = claim_one()
    reply = ExplanationRevisionFactory(question=job.study_question, job=job)
    assert transitions.complete(job, revision=reply, llm_ms=1234) == Outcome.COMPLETED
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert (job.revision, job.llm_ms) == (reply, 1234)
    assert job.completed_at is not None and job.claim_token is None
    assert transitions.complete(job) == Outcome.LOST, "a second completion must be refused"


def test_fail_transient_retries_with_backoff_then_fails():
    StudyQuestionJobFactory()
    job = claim_one()
    assert transitions.fail(job, ErrorCode.LLM_TIMEOUT, "slow") == Outcome.RETRYING
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.error_code == "llm_timeout" and job.error_message == "slow"
    assert job.run_after > timezone.now() + timedelta(seconds=20)  # 30 s base, +/-20 % jitter
    assert job.attempts == 1
    for attempt in (2, 3):
        StudyQuestionJob.objects.filter(pk=job.pk).update(run_after=timezone.now())
        job = claim_one()
        assert job.attempts == attempt
        expected = Outcome.RETRYING if attempt < 3 else Outcome.FAILED
        assert transitions.fail(job, ErrorCode.LLM_SERVER_ERROR, "500") == expected
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.completed_at is not None


def test_fail_permanent_fails_at_once():
    StudyQuestionJobFactory()
    job = claim_one()
    assert transitions.fail(job, ErrorCode.LLM_REJECTED, "404 model") == Outcome.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error_code) == ("failed", 1, "llm_rejected")


def test_fail_honours_retry_after_and_rejects_unknown_codes():
    StudyQuestionJobFactory()
    job = claim_one()
    with pytest.raises(ValueError):
        transitions.fail(job, "bogus")
    assert transitions.fail(job, ErrorCode.LLM_OVERLOADED, "429", retry_after=7) == Outcome.RETRYING
    job.refresh_from_db()
    delay = (job.run_after - timezone.now()).total_seconds()
    assert 5 < delay <= 7


def test_fail_is_fenced():
    StudyQuestionJobFactory()
    job = claim_one()
    transitions.complete(job)
    assert transitions.fail(job, ErrorCode.LLM_TIMEOUT) == Outcome.LOST
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED


def test_release_keeps_the_attempt(django_capture_on_commit_callbacks):
    StudyQuestionJobFactory()
    job = claim_one()
    with django_capture_on_commit_callbacks(execute=True):
        outcome = transitions.release(
            job, delay=30, code=ErrorCode.LLM_UNAVAILABLE, message="refused"
        )
        assert outcome == Outcome.RELEASED
    assert job.attempts == 0
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error_code) == ("pending", 0, "llm_unavailable")
    assert job.run_after > timezone.now() + timedelta(seconds=25)
    assert transitions.release(job) == Outcome.LOST, "releasing a job no longer ours is refused"


def test_skip_claimed():
    StudyQuestionJobFactory(kind=JobKind.SESSION_SUMMARY)
    job = claim_one()
    assert (
        transitions.skip_claimed(job, ErrorCode.UNSUPPORTED_KIND, "not implemented")
        == Outcome.SKIPPED
    )
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("skipped", "unsupported_kind")
    assert job.completed_at is not None
    assert transitions.skip_claimed(job, ErrorCode.UNSUPPORTED_KIND) == Outcome.LOST


def test_fencing_after_stale_reset_and_reclaim():
    StudyQuestionJobFactory()
    job_a = claim_one("A")
    make_stale(job_a)
    assert transitions.reset_stale() == transitions.StaleResult(reset=1, failed=0)
    job_b = claim_one("B")
    assert job_b.pk == job_a.pk and job_b.claim_token != job_a.claim_token
    assert transitions.complete(job_a, llm_ms=1) == Outcome.LOST
    assert not transitions.heartbeat(job_a)
    assert transitions.fail(job_a, ErrorCode.INTERNAL) == Outcome.LOST
    assert transitions.release(job_a) == Outcome.LOST
    assert transitions.skip_claimed(job_a, ErrorCode.UNKNOWN_KIND) == Outcome.LOST
    assert transitions.retry_for_quality(job_a, reason="flagged") == Outcome.LOST
    row = StudyQuestionJob.objects.get(pk=job_a.pk)
    assert (row.status, row.worker_id, row.claim_token) == ("processing", "B", job_b.claim_token)
    assert transitions.complete(job_b, llm_ms=2) == Outcome.COMPLETED
    row.refresh_from_db()
    assert (row.status, row.llm_ms, row.attempts) == ("completed", 2, 2)


# --------------------------------------------------------------------------- operator


def test_retry_moves_failed_and_skipped_back_with_attempts_reset():
    failed = StudyQuestionJobFactory(status="failed", attempts=3, error_code="llm_timeout")
    skipped = StudyQuestionJobFactory(status="skipped", error_code="operator_skipped")
    result = retry_ended([failed.pk, skipped.pk])
    assert result.retried == sorted([failed.pk, skipped.pk])
    for job in (failed, skipped):
        job.refresh_from_db()
        assert (job.status, job.attempts, job.error_code, job.completed_at) == (
            "pending",
            0,
            "",
            None,
        )


def test_retry_refuses_wrong_states_missing_and_conflicts():
    pending = StudyQuestionJobFactory()
    processing = StudyQuestionJobFactory(status="processing")
    completed = StudyQuestionJobFactory(status="completed")
    # A failed job whose question already has a new active job: retrying would duplicate.
    old_failed = StudyQuestionJobFactory(status="failed", study_question=pending.study_question)
    result = retry_ended([pending.pk, processing.pk, completed.pk, old_failed.pk, 424242])
    assert result.retried == []
    assert result.wrong_state == sorted([pending.pk, processing.pk, completed.pk])
    assert result.conflicts == [old_failed.pk]
    assert result.active_for == {old_failed.pk: pending.pk}  # the job in the way, by name
    old_failed.refresh_from_db()
    assert old_failed.status == "failed"
    assert StudyQuestionJob.objects.filter(status="completed").count() == 1


def test_retry_of_two_failed_jobs_for_one_pair_makes_one_active():
    question = StudyQuestionFactory()
    a = StudyQuestionJobFactory(status="failed", study_question=question)
    b = StudyQuestionJobFactory(status="failed", study_question=question)
    result = retry_ended([a.pk, b.pk])
    assert result.retried == [a.pk] and result.conflicts == [b.pk]
    assert result.active_for == {b.pk: a.pk}
    assert StudyQuestionJob.objects.active().count() == 1


def test_refusals_name_each_refused_job_and_the_active_one_bounded():
    assert refusals({13: 41, 12: 40}) == "12 → 40, 13 → 41"
    assert refusals({12: None}) == "12 → -"
    assert refusals({n: n + 100 for n in range(1, 5)}, limit=2) == "1 → 101, 2 → 102, …"


def test_operator_skip_pending_and_processing_fences_the_worker():
    pending = StudyQuestionJobFactory()
    StudyQuestionJobFactory()
    running = transitions.claim(worker_id="w", limit=1)[0]
    assert running.pk == pending.pk
    other = StudyQuestionJob.objects.exclude(pk=running.pk).get()
    done = StudyQuestionJobFactory(status="completed")
    result = skip([running.pk, other.pk, done.pk, 31337])
    assert result.skipped == sorted([running.pk, other.pk])
    assert result.wrong_state == sorted([done.pk, 31337])
    assert transitions.complete(running) == Outcome.LOST, "the worker's late write must be refused"
    running.refresh_from_db()
    assert (running.status, running.error_code) == ("skipped", "operator_skipped")


def test_reset_stale_resets_dead_jobs_and_fails_exhausted_ones():
    for _ in range(3):
        StudyQuestionJobFactory()
    dead, exhausted_job, live = transitions.claim(worker_id="w", limit=3)
    StudyQuestionJob.objects.filter(pk=exhausted_job.pk).update(attempts=3)
    make_stale(dead)
    make_stale(exhausted_job)
    assert transitions.reset_stale(dry_run=True) == transitions.StaleResult(reset=1, failed=1)
    assert StudyQuestionJob.objects.filter(status="processing").count() == 3
    assert transitions.reset_stale() == transitions.StaleResult(reset=1, failed=1)
    dead.refresh_from_db()
    exhausted_job.refresh_from_db()
    live.refresh_from_db()
    assert (dead.status, dead.error_code, dead.claim_token) == ("pending", "stale", None)
    assert dead.attempts == 1, "the stale attempt stays counted"
    assert (exhausted_job.status, exhausted_job.error_code) == ("failed", "stale")
    assert live.status == "processing"
    assert transitions.reset_stale() == transitions.StaleResult(reset=0, failed=0)


def test_reset_stale_threshold_is_configurable():
    StudyQuestionJobFactory()
    job = claim_one()
    make_stale(job, minutes=5)
    assert transitions.reset_stale().reset == 0  # default 10 minutes
    assert transitions.reset_stale(older_than=timedelta(minutes=4)).reset == 1


def test_a_job_that_keeps_going_stale_ends_failed():
    StudyQuestionJobFactory()
    for attempt in (1, 2, 3):
        job = claim_one()
        assert job.attempts == attempt
        make_stale(job)
        transitions.reset_stale()
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "stale")
    assert transitions.claim(worker_id="w") == []


# --------------------------------------------------------------------------- misc


def test_claim_takes_exactly_the_ready_jobs():
    """A claim takes what ``ready`` lists, and that is every due pending job with attempts left."""
    now = timezone.now()
    future = now + timedelta(hours=1)
    ready = [StudyQuestionJobFactory(), StudyQuestionJobFactory(attempts=2, max_attempts=3)]
    StudyQuestionJobFactory(run_after=future)  # not due yet
    StudyQuestionJobFactory(attempts=3, max_attempts=3)  # out of attempts
    for status in ("processing", "completed", "failed", "skipped"):
        StudyQuestionJobFactory(status=status)
    expected = {job.pk for job in transitions.ready()}
    assert expected == {job.pk for job in ready}
    claimed = transitions.claim(worker_id="w", limit=100)
    assert {job.pk for job in claimed} == expected
    assert [job.attempts for job in claimed] == [1, 3]
    assert all(job.status == "processing" and job.claim_token for job in claimed)


def test_transitions_log_key_value_lines(caplog, django_capture_on_commit_callbacks):
    caplog.set_level(logging.INFO, logger="studyqueue.queue")
    question = StudyQuestionFactory()
    job = enqueue(question).job
    claimed = claim_one("wk")
    with django_capture_on_commit_callbacks(execute=True):
        transitions.fail(claimed, ErrorCode.LLM_REJECTED, "no")
    lines = [r.getMessage() for r in caplog.records if r.name == "studyqueue.queue"]
    assert lines[0] == (
        f"study_job_enqueued id={job.pk} question={question.pk} kind=explanation "
        "status=pending error_code=- attempts=0"
    )
    assert lines[1].startswith(f"study_job_claimed id={job.pk} ") and lines[1].endswith("worker=wk")
    assert lines[2] == (
        f"study_job_failed id={job.pk} question={question.pk} kind=explanation "
        "status=failed error_code=llm_rejected attempts=1"
    )


@pytest.mark.django_db(transaction=True)
def test_a_write_rolled_back_leaves_the_claim_usable_and_logs_nothing(caplog):
    """The connection dies between complete() and COMMIT: nothing happened, and the worker
    can still record the failure under its claim."""
    caplog.set_level(logging.INFO, logger="studyqueue.queue")
    StudyQuestionJobFactory()
    job = claim_one()
    token = job.claim_token
    with pytest.raises(RuntimeError), transaction.atomic():
        assert transitions.complete(job, llm_ms=1) == Outcome.COMPLETED
        raise RuntimeError("connection lost before COMMIT")
    assert (job.status, job.claim_token) == ("processing", token)
    assert not any("study_job_completed" in r.getMessage() for r in caplog.records)
    assert transitions.fail(job, ErrorCode.INTERNAL, "commit failed") == Outcome.RETRYING
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("pending", "internal")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_migration_between_claims_does_not_break_the_next_claim():
    """The claim is prepared once per session; a column type change from another session (a
    migration while consumers run) makes PostgreSQL refuse that plan, and the next claim
    prepares it again and works."""
    import psycopg
    from django.db import connection

    from studyqueue.queue.pg import psycopg_kwargs

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall()]

    for _ in range(10):
        enqueue(StudyQuestionFactory())
    for _ in range(6):
        (job,) = transitions.claim(worker_id="w", limit=1, prepared=True)
        assert transitions.complete(job) == Outcome.COMPLETED
    (claim,) = prepared()  # six claims, one PREPARE
    assert claim.startswith("PREPARE studyqueue_") and "FOR UPDATE SKIP LOCKED" in claim
    table = StudyQuestionJob._meta.db_table
    with psycopg.connect(**psycopg_kwargs(connection.settings_dict), autocommit=True) as other:
        other.execute(f"ALTER TABLE {table} ALTER COLUMN worker_id TYPE varchar(250)")
        try:
            (job,) = transitions.claim(worker_id="w", limit=1, prepared=True)
            assert transitions.complete(job) == Outcome.COMPLETED
        finally:
            other.execute(f"ALTER TABLE {table} ALTER COLUMN worker_id TYPE varchar(200)")
            connection.close()


# --------------------------------------------------------------------------- pause


def test_a_paused_kind_is_not_claimed_and_ready_agrees():
    explanation = StudyQuestionJobFactory()
    summary = StudyQuestionJobFactory(kind=JobKind.SESSION_SUMMARY)
    row, created = pauses.pause(JobKind.EXPLANATION, reason="GPU busy", by="ops")
    assert created and (row.reason, row.paused_by) == ("GPU busy", "ops")
    assert transitions.ready() == [summary]
    assert [j.pk for j in transitions.claim(worker_id="w", limit=10)] == [summary.pk]
    assert transitions.next_due_in() is None, "a paused kind is not due: no busy cycling"
    assert enqueue(StudyQuestionFactory()).created, "enqueueing still works"
    assert resume(JobKind.EXPLANATION)
    assert {j.pk for j in transitions.claim(worker_id="w", limit=10)} >= {explanation.pk}


def test_pausing_everything_stops_every_kind_and_pause_is_idempotent():
    StudyQuestionJobFactory()
    StudyQuestionJobFactory(kind=JobKind.SESSION_SUMMARY)
    first, created = pauses.pause(reason="maintenance", by="a")
    again, created_again = pauses.pause(reason="other", by="b")
    assert created and not created_again and again.pk == first.pk
    assert again.reason == "maintenance", "the first pause is kept"
    assert transitions.claim(worker_id="w", limit=10) == []
    assert paused_kinds() == [""]
    assert not resume(JobKind.EXPLANATION), "only the pause of every kind exists"
    assert resume()
    assert len(transitions.claim(worker_id="w", limit=10)) == 2


def test_pausing_an_unknown_kind_is_refused():
    with pytest.raises(EnqueueError, match="unknown job kind"):
        pauses.pause("poem")
