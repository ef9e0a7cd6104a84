"""Every attempt kept: the claim opens a ``JobAttempt``, the transition that
ends it closes it (in the same statement or transaction), and it is pruned with its job; on
SQLite and PostgreSQL, against the real test LLM server where a call is involved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from studyqueue.models import ErrorCode, JobAttempt, StudyQuestionJob
from studyqueue.queue import operations, transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.operations import prune_finished, retry_ended
from studyqueue.queue.transitions import Outcome
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def attempts_of(job_id: int) -> list[JobAttempt]:
    return list(JobAttempt.objects.filter(job_id=job_id).order_by("number"))


def history(job: StudyQuestionJob) -> list[tuple]:
    return [(a.number, a.outcome, a.error_code, a.worker_id) for a in attempts_of(job.pk)]


def claim(worker: str = "w1", limit: int = 1) -> list[StudyQuestionJob]:
    return transitions.claim(worker_id=worker, limit=limit)


def make_stale(job: StudyQuestionJob) -> None:
    """Test set-up: its worker died an hour ago."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    StudyQuestionJob.objects.filter(pk=job.pk).update(heartbeat_at=an_hour_ago)


def make_due() -> None:
    """Test set-up: every pending job is due now (skip its backoff)."""
    StudyQuestionJob.objects.update(run_after=timezone.now())


def test_a_job_that_failed_twice_then_completed_shows_three_attempts_with_their_errors(
    settings, llm_server, make_consumer
):
    job = enqueue(StudyQuestionFactory(text="What is 2 + 2?")).job
    consumer = make_consumer(worker_id="host:1:abc")
    for fault in ("malformed", "null"):  # two failed calls: each retries
        llm_server.fault = fault
        assert consumer.run_cycle().outcomes == {"retrying": 1}
        make_due()
    llm_server.fault = ""
    assert consumer.run_cycle().outcomes == {"completed": 1}

    worker = "host:1:abc"
    assert history(job) == [
        (1, "retrying", ErrorCode.LLM_BAD_RESPONSE, worker),
        (2, "retrying", ErrorCode.LLM_EMPTY, worker),
        (3, "completed", "", worker),
    ]
    first, second, third = attempts_of(job.pk)
    assert first.error_message and second.error_message and third.error_message == ""
    assert (third.prompt_tokens, third.completion_tokens) == (42, 7)
    assert third.first_token_ms is not None and first.prompt_tokens is None
    for attempt in (first, second, third):
        assert attempt.started_at <= attempt.ended_at
    assert first.ended_at <= second.started_at and second.ended_at <= third.started_at


def test_a_batch_claim_opens_one_attempt_per_job_numbered_after_the_last():
    jobs = [enqueue(StudyQuestionFactory()).job for _ in range(4)]
    claimed = claim("w1", limit=10)
    assert [j.pk for j in claimed] == [j.pk for j in jobs]
    opened = JobAttempt.objects.filter(ended_at__isnull=True).order_by("job_id")
    assert [(a.job_id, a.number, a.worker_id) for a in opened] == [(j.pk, 1, "w1") for j in jobs]
    assert all(a.started_at == j.started_at for a, j in zip(opened, claimed, strict=True))
    # Failed for good, retried by an operator (attempts reset): the log goes on counting.
    assert transitions.fail(claimed[0], ErrorCode.LLM_REJECTED, "no") == Outcome.FAILED
    assert retry_ended([jobs[0].pk]).retried == [jobs[0].pk]
    (again,) = claim("w2")
    assert again.pk == jobs[0].pk and again.attempts == 1
    assert history(again) == [
        (1, "failed", ErrorCode.LLM_REJECTED, "w1"),
        (2, "", "", "w2"),
    ]


def test_claim_one_opens_an_attempt_too():
    job = enqueue(StudyQuestionFactory()).job
    assert transitions.claim_job(job.pk, worker_id="operator") is not None
    assert history(job) == [(1, "", "", "operator")]


def test_each_transition_closes_the_attempt_with_its_outcome():
    jobs = [enqueue(StudyQuestionFactory()).job for _ in range(5)]
    a, b, c, d, e = claim(limit=5)
    revision = ExplanationRevisionFactory(
        question_id=a.study_question_id, prompt_tokens=100, completion_tokens=20,
        first_token_ms=35,
    )  # fmt: skip
    assert transitions.complete(a, revision=revision, llm_ms=900) == Outcome.COMPLETED
    assert (
        transitions.release(b, code=ErrorCode.LLM_UNAVAILABLE, message="refused")
        == Outcome.RELEASED
    )
    assert transitions.skip_claimed(c, ErrorCode.UNSUPPORTED_KIND, "reserved") == Outcome.SKIPPED
    assert transitions.retry_for_quality(d, reason="flagged", revision=revision) == Outcome.RETRYING
    assert operations.skip([e.pk]).skipped == [e.pk]  # an operator, while it runs
    rows = {row.job_id: row for row in JobAttempt.objects.all()}
    assert [
        (rows[j.pk].outcome, rows[j.pk].error_code, rows[j.pk].error_message) for j in jobs
    ] == [
        ("completed", "", ""),
        ("released", ErrorCode.LLM_UNAVAILABLE, "refused"),
        ("skipped", ErrorCode.UNSUPPORTED_KIND, "reserved"),
        ("retrying", "", "flagged"),
        ("skipped", ErrorCode.OPERATOR_SKIPPED, "Skipped by an operator"),
    ]
    assert (rows[a.pk].prompt_tokens, rows[a.pk].completion_tokens) == (100, 20)
    assert rows[a.pk].first_token_ms == 35 and rows[d.pk].first_token_ms == 35
    assert all(row.ended_at is not None for row in rows.values())


def test_the_error_message_is_capped_like_the_jobs():
    enqueue(StudyQuestionFactory())
    (job,) = claim()
    transitions.fail(job, ErrorCode.LLM_SERVER_ERROR, "x" * 10_000)
    (attempt,) = JobAttempt.objects.all()
    job.refresh_from_db()
    assert len(attempt.error_message) == transitions.MAX_ERROR_MESSAGE
    assert attempt.error_message == job.error_message


def test_a_stale_reset_closes_the_attempt_as_stale():
    reset = enqueue(StudyQuestionFactory()).job
    exhausted = enqueue(StudyQuestionFactory()).job
    StudyQuestionJob.objects.filter(pk=exhausted.pk).update(max_attempts=1)
    claim(limit=2)
    make_stale(reset)
    make_stale(exhausted)
    result = transitions.reset_stale()
    assert (result.reset_ids, result.failed_ids) == ([reset.pk], [exhausted.pk])
    for job in (reset, exhausted):
        (attempt,) = attempts_of(job.pk)
        assert (attempt.outcome, attempt.error_code) == ("stale", ErrorCode.STALE)
        assert attempt.error_message.startswith("no heartbeat for")
        assert attempt.ended_at is not None


def test_a_fenced_out_late_write_does_not_close_someone_elses_attempt():
    job = enqueue(StudyQuestionFactory()).job
    (old,) = claim("w1")
    make_stale(old)
    transitions.reset_stale()
    (new,) = claim("w2")
    # The first worker wakes up and reports: its claim is gone, nothing is written.
    assert transitions.complete(old, llm_ms=5) == Outcome.LOST
    assert transitions.fail(old, ErrorCode.LLM_TIMEOUT, "late") == Outcome.LOST
    assert history(job) == [(1, "stale", ErrorCode.STALE, "w1"), (2, "", "", "w2")]
    assert transitions.complete(new, llm_ms=5) == Outcome.COMPLETED
    assert history(job) == [(1, "stale", ErrorCode.STALE, "w1"), (2, "completed", "", "w2")]


def test_a_rolled_back_transition_leaves_the_attempt_open():
    job = enqueue(StudyQuestionFactory()).job
    (claimed,) = claim()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert transitions.complete(claimed, llm_ms=1) == Outcome.COMPLETED
        raise RuntimeError("connection lost before COMMIT")
    assert history(job) == [(1, "", "", "w1")]
    assert transitions.fail(claimed, ErrorCode.INTERNAL, "commit failed") == Outcome.RETRYING
    assert history(job) == [(1, "retrying", ErrorCode.INTERNAL, "w1")]


def test_a_stray_open_attempt_never_blocks_a_claim():
    """Bookkeeping must not stop work: an attempt left open (a row written by hand, say)
    does not make the claim fail; the job is claimed and the stray row stays as it was."""
    job = enqueue(StudyQuestionFactory()).job
    JobAttempt.objects.create(job=job, number=7, started_at=timezone.now(), worker_id="ghost")
    (claimed,) = claim()
    assert claimed.pk == job.pk
    assert history(job) == [(7, "", "", "ghost")]


def test_pruning_the_job_prunes_its_attempts():
    old, kept = (enqueue(StudyQuestionFactory()).job for _ in range(2))
    for job in claim(limit=2):
        transitions.complete(job, llm_ms=1)
    StudyQuestionJob.objects.filter(pk=old.pk).update(
        completed_at=timezone.now() - timedelta(days=40)
    )
    assert prune_finished(older_than=timedelta(days=30)) == 1
    assert list(JobAttempt.objects.values_list("job_id", flat=True)) == [kept.pk]


@pytest.mark.parametrize("stale_jobs", [3, 60])
def test_the_stale_scan_stays_set_based(stale_jobs):
    """The same statements for 3 stale jobs as for 60: none per job."""
    for _ in range(stale_jobs):
        enqueue(StudyQuestionFactory())
    for job in claim(limit=stale_jobs):
        make_stale(job)
    with CaptureQueriesContext(connection) as captured:
        transitions.reset_stale()
    writes = [
        q["sql"].split()[1] for q in captured.captured_queries if q["sql"].startswith("UPDATE")
    ]
    # Close the attempts, then reset the jobs (none is out of attempts: no statement).
    assert writes == ['"studyqueue_jobattempt"', '"studyqueue_studyquestionjob"']
    assert JobAttempt.objects.filter(outcome="stale").count() == stale_jobs
