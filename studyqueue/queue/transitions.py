"""The job state machine: every status write in studyqueue goes through this module.

Consumer-side functions (``heartbeat``, ``complete``, ``fail``, ``release``,
``skip_claimed``, ``retry_for_quality``) are *fenced*: they apply only while the job is
still ``processing`` under the claim token the caller holds, else return ``Outcome.LOST``
and write nothing (a worker whose job was reset as stale and claimed again). When a failure
retries and after how long is the failure policy's to say (``studyqueue.queue.retry``).

``reset_stale`` puts jobs whose worker went silent back (or ends them). Beside this module:
the attempt log these writes keep (below), ``queue.enqueue`` (new jobs),
``queue.operations`` (the operator's retry, skip and prune) and ``queue.pauses``. The
functions are synchronous (the consumer runs them through ``sync_to_async`` on its own
connections). Which jobs may run is ``queue.sql``'s ``claimable``: the claim,
``next_due_in``, ``ready`` and ``has_ready`` read it.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import connections, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.exceptions import EnqueueError
from studyqueue.models import (
    ErrorCode,
    ExplanationRevision,
    JobAttempt,
    JobKind,
    JobStatus,
    Outcome,
    StudyQuestionJob,
    fit,
    key_audit_holds,
)
from studyqueue.queue import retry as policy
from studyqueue.queue import sql

logger = logging.getLogger("studyqueue.queue")


# The attempt log: one row per time a job was run, opened with its claim and ended with what
# became of it, in the same statement or transaction as the job's own write.


class _Reported(Protocol):
    """What a reply reports (``services.llm.LLMReply``)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    first_token_ms: int | None
    endpoint: str


@dataclass(frozen=True)
class Usage:
    """What an attempt's LLM call reported, when it got a reply (its fields are columns)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_token_ms: int | None = None
    endpoint: str = ""  # the server that answered (the last call's)

    @classmethod
    def of(cls, replies: Sequence[_Reported]) -> Usage | None:
        """Several calls of one attempt: tokens summed, the first call's time to first token."""
        if not replies:
            return None

        def total(values: Iterable[int | None]) -> int | None:
            said = [value for value in values if value is not None]
            return sum(said) if said else None

        return cls(
            prompt_tokens=total(reply.prompt_tokens for reply in replies),
            completion_tokens=total(reply.completion_tokens for reply in replies),
            first_token_ms=replies[0].first_token_ms,
            endpoint=replies[-1].endpoint,
        )


def open_attempts(db: str) -> QuerySet[JobAttempt]:
    return JobAttempt.objects.using(db).filter(ended_at__isnull=True)


@dataclass(frozen=True)
class AttemptEnding:
    """How an attempt ended: what closing it writes."""

    outcome: Outcome
    ended_at: datetime
    error_code: str = ""
    error_message: str = ""
    usage: Usage | None = None

    def values(self) -> dict[str, Any]:
        """The attempt's fields and their values."""
        values = asdict(self)
        values.update(values.pop("usage") or {})  # the reply's columns, when there was one
        return values


def end_attempt(db: str, job_id: int, ending: AttemptEnding) -> None:
    """End the job's open attempt. Call it only after the job's fenced write applied, in its
    transaction: the open attempt is then the caller's own claim's."""
    open_attempts(db).filter(job_id=job_id).update(**ending.values())


def end_attempts(db: str, jobs: list[int] | QuerySet[Any, Any], ending: AttemptEnding) -> int:
    """End the open attempts of many jobs (ids, or a QuerySet of ids) in one statement."""
    return open_attempts(db).filter(job_id__in=jobs).update(**ending.values())


def attempts_of(job_id: int, *, last: int) -> list[JobAttempt]:
    """A job's last ``last`` attempts, first to last."""
    return list(reversed(JobAttempt.objects.filter(job_id=job_id).order_by("-number")[:last]))


MAX_ERROR_MESSAGE = 2000


def validate_kind(kind: str) -> str:
    if kind not in JobKind.values:
        raise EnqueueError(
            f"unknown job kind {kind!r}; expected one of {', '.join(JobKind.values)}"
        )
    return kind


def log_job(event: str, job: StudyQuestionJob, level: int = logging.INFO, **extra: Any) -> None:
    """One key=value line per transition."""
    if not logger.isEnabledFor(level):
        return
    fields = {
        "id": job.pk,
        "question": job.study_question_id,
        "kind": job.kind,
        "status": job.status,
        "error_code": job.error_code or "-",
        "attempts": job.attempts,
        **extra,
    }
    logger.log(level, "study_job_%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))


def clip(message: str) -> str:
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[: MAX_ERROR_MESSAGE - 3] + "..."


def _fenced_update(job: StudyQuestionJob, values: dict[str, Any]) -> bool:
    """Apply ``values`` only while the job is still processing under the caller's claim.
    Raw SQL (``_fenced_update_sql``): every job ends here, and the ORM's filter and update
    took three times as long to build as the statement took to run."""
    db = StudyQuestionJob.objects.all().db
    with connections[db].cursor() as cursor:
        cursor.execute(*_fenced_update_sql(job, values, db))
        return cursor.fetchone() is not None


def _fenced_update_sql(
    job: StudyQuestionJob, values: dict[str, Any], db: str
) -> tuple[str, dict[str, Any]]:
    """``_fenced_update`` as one raw ``UPDATE … RETURNING id`` (SQL, parameters), for a
    statement that does more with the job it updated (``finish_with_attempt``)."""
    sets, params = sql.assignments(StudyQuestionJob, values, db, prefix="job_")
    params.update(
        fence_id=job.pk,
        fence_token=sql.db_value(StudyQuestionJob, "claim_token", job.claim_token, db),
    )
    return sql.fenced_update(sets), params


def _run_claim(
    statement: Callable[[str], str],
    worker_id: str,
    level: int = logging.INFO,
    prepared: bool = False,
    **params: Any,
) -> list[StudyQuestionJob]:
    """Run a claim statement (``sql.claim`` or ``sql.claim_one``, by vendor) with a fresh
    claim token, opening the claimed jobs' attempts; the claimed jobs in the order they were
    taken (priority, then id)."""
    # Where ``StudyQuestionJob.objects.raw`` runs it: parameters adapted for it.
    db = StudyQuestionJob.objects.all().db
    params.update(
        token=sql.db_value(StudyQuestionJob, "claim_token", uuid.uuid4(), db),
        worker_id=fit(StudyQuestionJob, "worker_id", worker_id),
        now=sql.db_value(StudyQuestionJob, "started_at", timezone.now(), db),
    )
    vendor = sql.vendor(db)
    if vendor == "postgresql":  # one statement: atomic as it is

        def run(text: str) -> list[StudyQuestionJob]:
            return list(StudyQuestionJob.objects.raw(text, params))

        jobs = sql.run_prepared(db, statement(vendor), run) if prepared else run(statement(vendor))
    else:
        with transaction.atomic(using=db):
            jobs = list(StudyQuestionJob.objects.raw(statement(vendor), params))
            sql.open_claimed_attempts(db, [job.pk for job in jobs])
    jobs.sort(key=lambda job: (job.priority, job.pk))
    for job in jobs:
        log_job("claimed", job, level, worker=worker_id)
    return jobs


def claim(
    *,
    worker_id: str,
    limit: int | None = None,
    deliveries: bool = True,
    level: int = logging.INFO,
    prepared: bool = False,
) -> list[StudyQuestionJob]:
    """Atomically claim up to ``limit`` ready jobs (deliveries among them unless told not)
    for ``worker_id``: counts the attempt, stamps a fresh claim token and heartbeat.
    ``prepared``: the statement is prepared once per session (``sql.run_prepared``: only on
    a PostgreSQL session that is one connection, ``pg.mode``)."""
    limit = conf.BATCH_SIZE if limit is None else limit
    if limit < 1:
        return []
    holds = key_audit_holds()
    statement = functools.partial(sql.claim, limit=limit)
    return _run_claim(statement, worker_id, level, prepared, holds=holds, deliveries=deliveries)


def claim_job(job_id: int, *, worker_id: str) -> StudyQuestionJob | None:
    """Claim one given pending job (``sql.claim_one``); None if it is not claimable."""
    jobs = _run_claim(sql.claim_one, worker_id, job_id=job_id)
    return jobs[0] if jobs else None


def heartbeat(job: StudyQuestionJob) -> bool:
    """Refresh a claimed job's liveness; False if the claim is no longer ours."""
    now = timezone.now()
    applied = _fenced_update(job, {"heartbeat_at": now})
    if applied:
        job.heartbeat_at = now
    else:
        log_job("heartbeat_refused", job, level=logging.WARNING)
    return applied


def _finish(
    job: StudyQuestionJob,
    event: str,
    values: dict[str, Any],
    outcome: Outcome,
    level: int = logging.INFO,
    usage: Usage | None = None,
) -> Outcome:
    """Apply a fenced transition and close the claim's attempt with it, both or neither;
    ``outcome`` if it applied, else ``Outcome.LOST`` (and nothing is written)."""
    db = job._state.db
    assert db is not None, "a claimed job was read from the database"
    ending = AttemptEnding(
        Outcome(outcome),
        ended_at=values.get("completed_at") or timezone.now(),
        error_code=values.get("error_code", ""),
        error_message=values.get("error_message", ""),
        usage=usage,
    )
    if sql.postgres(db):
        # One statement: atomic as it is, one round trip, and outside a caller's
        # transaction one commit (the consumer's hot path: every job ends here).
        applied = sql.finish_with_attempt(db, _fenced_update_sql(job, values, db), ending.values())
    else:
        # No savepoint: inside a caller's transaction (store) the two share its fate.
        with transaction.atomic(using=db, savepoint=False):
            applied = _fenced_update(job, values)
            if applied:
                end_attempt(db, job.pk, ending)
    if not applied:
        log_job(f"{event}_refused", job, level=logging.WARNING, reason="claim_lost")
        return Outcome.LOST

    def committed() -> None:
        # Only once the write is durable: inside a transaction that later rolls back
        # (the connection dies before COMMIT) the job keeps its claim token, so that
        # this worker can still record what happened, and no false line is logged.
        for name, value in values.items():
            setattr(job, name, value)
        log_job(event, job, level=level)

    # Outside a transaction (the statement committed) this runs at once.
    transaction.on_commit(committed, using=db)
    return outcome


def complete(
    job: StudyQuestionJob,
    *,
    revision: ExplanationRevision | None = None,
    llm_ms: int | None = None,
    usage: Usage | None = None,
) -> Outcome:
    """Mark a claimed job completed with its revision (the one its reply became, or the one it
    checked), its LLM time and what its calls reported (``usage``; by default, the revision's
    reply's: a check passes its own): ``COMPLETED``, or ``LOST`` if the claim was lost."""
    values = {
        "status": JobStatus.COMPLETED,
        "completed_at": timezone.now(),
        "error_code": "",
        "error_message": "",
        "claim_token": None,
        "free_releases": 0,
        "revision_id": revision.pk if revision is not None else None,
        "llm_ms": llm_ms,
    }
    usage = usage if usage is not None else _usage(revision)
    return _finish(job, "completed", values, Outcome.COMPLETED, usage=usage)


def _usage(revision: ExplanationRevision | None) -> Usage | None:
    """What the attempt's reply reported, from the revision it became (as a reply reports)."""
    return Usage.of([revision] if revision is not None else [])


def retry_for_quality(
    job: StudyQuestionJob,
    *,
    reason: str,
    max_tokens: int | None = None,
    revision: ExplanationRevision | None = None,
) -> Outcome:
    """A finished call whose reply was flagged (kept as ``revision``, not current): run the
    job once more, at once (with ``max_tokens`` if given); the next claim counts its attempt.
    Only once per job. Fenced: ``RETRYING``, or ``LOST``."""
    values: dict[str, Any] = {
        "status": JobStatus.PENDING,
        "run_after": timezone.now(),
        "claim_token": None,
        "quality_retried": True,
        "max_tokens": max_tokens if max_tokens is not None else job.max_tokens,
        "error_code": "",
        "error_message": clip(reason),
    }
    return _finish(job, "quality_retry", values, Outcome.RETRYING, usage=_usage(revision))


def fail(
    job: StudyQuestionJob, code: str, message: str = "", *, retry_after: float | None = None
) -> Outcome:
    """Record a failed attempt, counted: ``RETRYING``, ``FAILED``, or ``LOST`` if the claim
    was lost. Whether it retries and when is the policy's (``retry.decide``)."""
    failure = policy.Failure(ErrorCode(code), message, retry_after=retry_after)
    return apply(job, failure, policy.decide(failure, job))


def apply(job: StudyQuestionJob, failure: policy.Failure, decision: policy.Decision) -> Outcome:
    """Write what ``retry.decide`` answered for ``failure``: ``RELEASED``, ``RETRYING`` (after
    the decision's delay) or ``FAILED``; ``LOST`` if the claim was lost. A flagged reply's
    decision is the revision's to write (``revisions.Written``)."""
    if decision.action is policy.Action.RELEASE:
        return release(
            job,
            delay=decision.delay,
            code=failure.code,
            message=failure.message,
            reached_server=failure.reached_server,
            # The breaker opened: its own line says the server is down, not one per job.
            level=logging.DEBUG if decision.pause_server else logging.INFO,
        )
    if failure.flagged or decision.action is policy.Action.COMPLETE:
        raise ValueError("a flagged reply is written with its revision (revisions.Written)")
    if not failure.job_at_fault or failure.affects_all:
        # Handed back for free as often as the policy allows: from now on it counts.
        log_job("release_limit", job, logging.WARNING, free_releases=job.free_releases)
    now = timezone.now()
    values: dict[str, Any] = {
        "error_code": ErrorCode(failure.code),
        "error_message": clip(failure.message),
        "claim_token": None,
        "free_releases": 0,
    }
    if decision.action is policy.Action.RETRY:
        run_after = now + timedelta(seconds=decision.delay)
        values.update(status=JobStatus.PENDING, run_after=run_after)
        return _finish(job, "retry_scheduled", values, Outcome.RETRYING, logging.WARNING)
    values.update(status=JobStatus.FAILED, completed_at=now)
    return _finish(job, "failed", values, Outcome.FAILED, logging.WARNING)


def release(
    job: StudyQuestionJob,
    *,
    delay: float = 0.0,
    code: str = "",
    message: str = "",
    reached_server: bool = False,
    level: int = logging.INFO,
) -> Outcome:
    """Put a claimed job back to pending for after ``delay`` seconds, its attempt not counted
    (not its fault: the server is down, the consumer stopping): ``RELEASED``, or ``LOST``. A
    call that ``reached_server`` counts in ``free_releases``, which the policy bounds."""
    values: dict[str, Any] = {
        "status": JobStatus.PENDING,
        # Under the fence nobody else can change these: undo the claim's count.
        "attempts": job.attempts - 1,
        "free_releases": job.free_releases + 1 if reached_server else job.free_releases,
        "run_after": timezone.now() + timedelta(seconds=max(0.0, delay)),
        "claim_token": None,
        "error_code": ErrorCode(code) if code else "",
        "error_message": clip(message),
    }
    return _finish(job, "released", values, Outcome.RELEASED, level)


def skipped_values(code: str, message: str) -> dict[str, Any]:
    """The fields a skip sets, by the consumer (``skip_claimed``) or an operator (``skip``)."""
    return {
        "status": JobStatus.SKIPPED,
        "error_code": ErrorCode(code),
        "error_message": clip(message),
        "completed_at": timezone.now(),
        "claim_token": None,
    }


def skip_claimed(job: StudyQuestionJob, code: str, message: str = "") -> Outcome:
    """Mark a claimed job skipped (e.g. a reserved or unknown kind); fenced: ``SKIPPED``, or
    ``LOST``."""
    return _finish(job, "skipped", skipped_values(code, message), Outcome.SKIPPED)


# What ``retry.decide`` reads of a job (``retry.Tally``).
_TALLY = ("pk", "attempts", "max_attempts", "free_releases", "quality_retried")


@dataclass(frozen=True)
class StaleResult:
    """Outcome of a stale scan: jobs put back to pending, and jobs that ended failed."""

    reset: int
    failed: int
    reset_ids: list[int] = field(default_factory=list, compare=False)
    failed_ids: list[int] = field(default_factory=list, compare=False)


def reset_stale(
    *,
    older_than: timedelta | None = None,
    dry_run: bool = False,
    job_ids: Iterable[int] | None = None,
) -> StaleResult:
    """Processing jobs with no heartbeat for ``older_than`` go back to pending, or end
    ``failed`` (``stale``) once out of attempts: a job that keeps killing its worker cannot
    loop. Clearing the claim token fences the old worker out. ``job_ids`` limits the scan to
    those jobs (the admin's action on a selection)."""
    if older_than is None:
        older_than = timedelta(minutes=conf.STALE_MINUTES)
    now = timezone.now()
    stale = StudyQuestionJob.objects.stale(now - older_than)
    if job_ids is not None:
        stale = stale.filter(pk__in=sorted({int(i) for i in job_ids}))
    if not dry_run and not stale.exists():
        return StaleResult(reset=0, failed=0)  # the usual case: one cheap index probe
    if dry_run:
        failed_count = stale.filter(attempts__gte=F("max_attempts")).count()
        return StaleResult(reset=stale.count() - failed_count, failed=failed_count)
    message = f"no heartbeat for {older_than.total_seconds():.0f}s; worker presumed dead"
    common = {"claim_token": None, "error_code": ErrorCode.STALE, "error_message": message}
    db = stale.db
    with transaction.atomic(using=db):
        # Locked first: an old worker's fenced write waits for this transaction and
        # then finds its claim gone.
        rows = stale.select_for_update().only(*_TALLY)
        failure = policy.Failure(ErrorCode.STALE, message)
        fails = {job.pk: policy.decide(failure, job).action is policy.Action.FAIL for job in rows}
        failed_ids = sorted(pk for pk, ends in fails.items() if ends)
        reset_ids = sorted(pk for pk, ends in fails.items() if not ends)
        # Their attempts end as stale: the locked set as a subquery, not a list of ids.
        ending = AttemptEnding(Outcome.STALE, now, ErrorCode.STALE, message)
        end_attempts(db, stale.values("pk"), ending)
        StudyQuestionJob.objects.filter(pk__in=failed_ids).update(
            status=JobStatus.FAILED, completed_at=now, **common
        )
        StudyQuestionJob.objects.filter(pk__in=reset_ids).update(
            status=JobStatus.PENDING, run_after=now, started_at=None, heartbeat_at=None, **common
        )
    for job in StudyQuestionJob.objects.filter(pk__in=failed_ids + reset_ids):  # none: no query
        log_job("stale_failed" if job.pk in failed_ids else "stale_reset", job, logging.WARNING)
    return StaleResult(
        reset=len(reset_ids), failed=len(failed_ids), reset_ids=reset_ids, failed_ids=failed_ids
    )


def _claimable_jobs(**kwargs: Any) -> list[StudyQuestionJob]:
    db = StudyQuestionJob.objects.all().db
    now = sql.db_value(StudyQuestionJob, "run_after", timezone.now(), db)
    statement = sql.claimable_jobs(**kwargs)
    return list(StudyQuestionJob.objects.raw(statement, {"now": now, "holds": key_audit_holds()}))


def next_due_in() -> float | None:
    """Seconds until the earliest claimable job is due (0: one is ready); None if none."""
    first = _claimable_jobs(due=False, order="job.run_after", limit=1)
    if not first:
        return None
    return max(0.0, (first[0].run_after - timezone.now()).total_seconds())


def ready() -> list[StudyQuestionJob]:
    """The jobs a claim would take now (whatever its limit), by id."""
    return _claimable_jobs(due=True, order="job.id")


def has_ready() -> bool:
    """Whether a job is ready to claim now (what ``claim`` would take)."""
    return bool(_claimable_jobs(due=True, limit=1))
