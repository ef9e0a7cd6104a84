"""The operator's batches: retry ended jobs, skip, prune finished ones; by id, in batches
the database takes, logged as id ranges."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from studyqueue.models import ErrorCode, JobQuerySet, JobStatus, Outcome, StudyQuestionJob
from studyqueue.queue import notify, sql
from studyqueue.queue.transitions import AttemptEnding, end_attempts, skipped_values

logger = logging.getLogger("studyqueue.queue")


# Operator actions work on sets of rows, this many ids per statement (SQLite: its
# bound-parameter limit): 35,000 jobs take a few dozen statements, not ~100,000.
OPERATOR_BATCH = 500
OPERATOR_BATCH_POSTGRES = 5000

_RETRYABLE = (JobStatus.FAILED, JobStatus.SKIPPED)


def batches(ids: list[int], db: str) -> Iterable[list[int]]:
    """``ids`` in the chunks an operator action on database ``db`` takes per statement."""
    size = OPERATOR_BATCH_POSTGRES if sql.postgres(db) else OPERATOR_BATCH
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def id_ranges(ids: Iterable[int]) -> str:
    """Ids as compact sorted ranges for log lines and the admin log: ``1-4,7,9-10``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def log_set(event: str, ids: list[int], level: int = logging.INFO, **extra: Any) -> None:
    """One key=value line for a set of jobs an operator changed (one per batch)."""
    if ids and logger.isEnabledFor(level):
        fields = " ".join(f"{k}={v}" for k, v in extra.items())
        logger.log(
            level, "study_jobs_%s count=%s ids=%s%s", event, len(ids), id_ranges(ids),
            f" {fields}" if fields else "",
        )  # fmt: skip


@dataclass
class RetryResult:
    """Outcome of an operator retry, by job id."""

    retried: list[int] = field(default_factory=list)
    wrong_state: list[int] = field(default_factory=list)  # pending, processing or completed
    conflicts: list[int] = field(default_factory=list)  # another active job has the pair
    # For each conflict, the active job of its pair (None: it ended meanwhile), so that a
    # refusal can name the job that stands in the way.
    active_for: dict[int, int | None] = field(default_factory=dict)


def refusals(active_for: dict[int, int | None], limit: int = 10) -> str:
    """Refused jobs and the active job each would have doubled, ``12 → 40, 13 → 41, …``."""
    pairs = [f"{pk} → {active or '-'}" for pk, active in sorted(active_for.items())]
    return ", ".join(pairs[:limit]) + (", …" if len(pairs) > limit else "")


def _retry_values() -> dict[str, Any]:
    return {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "free_releases": 0,
        "run_after": timezone.now(),
        "error_code": "",
        "error_message": "",
        "started_at": None,
        "heartbeat_at": None,
        "completed_at": None,
        "claim_token": None,
        "worker_id": "",
    }


def retry_ended(job_ids: Iterable[int]) -> RetryResult:
    """Operator retry: failed or skipped jobs back to pending with attempts reset; refused where
    the (question, kind) has an active job (of two selected, the older is retried). Call it
    inside a transaction to make it all-or-nothing."""
    jobs = StudyQuestionJob.objects.all()
    result = RetryResult()
    for chunk in batches(sorted({int(i) for i in job_ids}), jobs.db):
        with transaction.atomic(using=jobs.db):
            _retry_batch(jobs, chunk, result)
    if result.retried:
        notify.send(notify.wake(), using=jobs.db)
    return result


def _retry_batch(jobs: JobQuerySet, chunk: list[int], result: RetryResult) -> None:
    # Locked: their status cannot change between the checks and the update.
    rows = sorted(
        jobs.filter(pk__in=chunk)
        .select_for_update()
        .values_list("pk", "status", "study_question_id", "kind")
    )
    wrong = [pk for pk, status, _, _ in rows if status not in _RETRYABLE]
    eligible = [(pk, question, kind) for pk, status, question, kind in rows if pk not in wrong]
    questions = {question for _, question, _ in eligible if question is not None}
    taken = set(
        jobs.active()
        .filter(study_question_id__in=questions)
        .values_list("study_question_id", "kind")
    )
    chosen, conflicts = [], []
    for pk, question, kind in eligible:
        if question is not None and (question, kind) in taken:
            conflicts.append(pk)
        else:
            taken.add((question, kind))  # (None, kind): a question-less job conflicts with none
            chosen.append(pk)
    try:
        with transaction.atomic(using=jobs.db):
            jobs.filter(pk__in=chosen).update(**_retry_values())
    except IntegrityError:
        # A job was enqueued for one of these questions meanwhile: one savepoint each.
        retried = []
        for pk in chosen:
            try:
                with transaction.atomic(using=jobs.db):
                    jobs.filter(pk=pk).update(**_retry_values())
                retried.append(pk)
            except IntegrityError:
                conflicts.append(pk)
        chosen = retried
    result.retried += chosen
    result.wrong_state += wrong
    result.conflicts += sorted(conflicts)
    if conflicts:
        pairs = {pk: (question, kind) for pk, question, kind in eligible}
        active = {
            (question, kind): pk
            for question, kind, pk in jobs.active()
            .filter(study_question_id__in={pairs[pk][0] for pk in conflicts})
            .values_list("study_question_id", "kind", "pk")
        }
        result.active_for.update({pk: active.get(pairs[pk]) for pk in conflicts})
    log_set("retried", chosen)
    log_set("retry_refused", wrong, logging.WARNING, reason="wrong_state")
    log_set("retry_refused", conflicts, logging.WARNING, reason="active_job_exists")


@dataclass
class SkipResult:
    """Outcome of an operator skip, by job id."""

    skipped: list[int] = field(default_factory=list)
    wrong_state: list[int] = field(default_factory=list)  # already finished, or unknown


def skip(job_ids: Iterable[int]) -> SkipResult:
    """Operator skip: pending or processing jobs become skipped (a running one's worker fenced)."""
    jobs = StudyQuestionJob.objects.all()
    db = jobs.db
    result = SkipResult()
    values = skipped_values(ErrorCode.OPERATOR_SKIPPED, "Skipped by an operator")
    ending = AttemptEnding(
        Outcome.SKIPPED, values["completed_at"], values["error_code"], values["error_message"]
    )
    for chunk in batches(sorted({int(i) for i in job_ids}), db):
        with transaction.atomic(using=db):
            active = jobs.active().filter(pk__in=chunk).select_for_update()
            running = dict(active.values_list("pk", "status"))
            done = sorted(running)
            processing = [pk for pk in done if running[pk] == JobStatus.PROCESSING]
            for job_id in processing:
                # Its consumer stops the LLM call at once (PostgreSQL; on SQLite at its
                # next heartbeat, which finds the claim gone).
                notify.send(notify.cancel(job_id), using=db)
            jobs.filter(pk__in=done).update(**values)
            end_attempts(db, processing, ending)
        result.skipped += done
        result.wrong_state += [i for i in chunk if i not in running]
        log_set("skipped", done, error_code=ErrorCode.OPERATOR_SKIPPED)
    return result


def withdraw(job_id: int) -> None:
    """A pending job its creator takes back (``JobStore.kept``): skipped, keeping the error
    or reason that sent it back."""
    jobs = StudyQuestionJob.objects.filter(pk=job_id, status=JobStatus.PENDING)
    if jobs.update(status=JobStatus.SKIPPED, completed_at=timezone.now()):
        log_set("withdrawn", [job_id])


def prune_finished(*, older_than: timedelta) -> int:
    """Delete finished (completed, failed, skipped) jobs that ended before ``older_than`` ago."""
    cutoff = timezone.now() - older_than
    # Their attempts go with them (CASCADE); the count is of jobs.
    _, per_model = StudyQuestionJob.objects.finished().filter(completed_at__lt=cutoff).delete()
    deleted = per_model.get(StudyQuestionJob._meta.label, 0)
    logger.info("study_jobs_pruned count=%s older_than_days=%s", deleted, older_than.days)
    return deleted
