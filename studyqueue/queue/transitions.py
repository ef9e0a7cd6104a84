"""The job state machine: every status write in studyqueue goes through this module.

Consumer-side functions (``heartbeat``, ``complete``, ``fail``, ``release``,
``skip_claimed``, ``retry_for_quality``) are *fenced*: they apply only while the job is
still ``processing`` under the claim token the caller holds. The transitions return the
``Outcome`` they made (``Outcome.LOST`` when the claim was no longer ours and nothing was
written); ``heartbeat`` returns whether it applied. A worker whose job was reset as stale
and claimed again writes nothing. When a failure retries and after how long is the failure
policy's to say (``studyqueue.queue.retry``).

Operator-side functions (``retry``, ``skip``, ``reset_stale``) take job ids or
thresholds and return what they changed. The functions are synchronous (the consumer runs
its writes through ``sync_to_async`` on its own connections); the reads a consume cycle
makes in one query have an async twin on Django's async ORM (``apaused_kinds``,
``anext_due_in``), built from the same QuerySet.

Queries run on studyqueue's database through the models' managers (``models.database()``:
the rule); a transaction or a notice takes the alias from the queryset or job it works on
(``jobs.db``, ``job._state.db``).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.db import IntegrityError, connections, models, transaction
from django.db.models import F, Min, OuterRef, QuerySet, Subquery
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.exceptions import EnqueueError
from studyqueue.models import (
    ErrorCode,
    JobAttempt,
    JobKind,
    JobQuerySet,
    JobStatus,
    Outcome,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
    fit,
    key_audit_holds,
    kind_priority,
)
from studyqueue.queue import notify
from studyqueue.queue import retry as policy

logger = logging.getLogger("studyqueue.queue")

Job = StudyQuestionJob

if TYPE_CHECKING:
    from studyqueue.models import ExplanationRevision

MAX_ERROR_MESSAGE = 2000


# --------------------------------------------------------------------------- the attempt log
# A row per claim (``JobAttempt``), opened by the claim and closed by the transition that ends
# it, in that transition's statement or transaction; the job page reads ``attempts_of``.
# And the pieces of the few statements the ORM cannot say: a field's value as the database
# wants it, and a ``SET`` list.


def db_value(model: type[models.Model], field_name: str, value: Any, db: str) -> Any:
    """A Python value as the database ``db`` wants it for ``model.field_name`` (a field's
    name, or a foreign key's ``…_id``), for a raw statement's parameters."""
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field)  # a concrete column, not a reverse relation
    return field.get_db_prep_save(value, connections[db])


def assignments(
    model: type[models.Model], values: dict[str, Any], db: str, *, prefix: str
) -> tuple[str, dict[str, Any]]:
    """``"column" = %(<prefix><name>)s, …`` for ``values`` (field name -> Python value) and
    its parameters (named with ``prefix``, so that two lists can share a statement)."""
    quote = connections[db].ops.quote_name
    parts, params = [], {}
    for name, value in values.items():
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field) and field.column is not None  # a column
        key = f"{prefix}{name}"
        parts.append(f"{quote(field.column)} = %({key})s")
        params[key] = db_value(model, name, value, db)
    return ", ".join(parts), params


# A claimed job's new attempt, numbered after the job's last one. ON CONFLICT: a job that
# somehow still had an open attempt is claimed all the same (bookkeeping never blocks work);
# SQLite needs the WHERE to read the ON CONFLICT of an INSERT … SELECT.
_OPEN_ATTEMPT = """
INSERT INTO studyqueue_jobattempt
    (job_id, number, started_at, worker_id, outcome, error_code, error_message)
SELECT job.id,
       COALESCE((SELECT MAX(a.number) FROM studyqueue_jobattempt AS a WHERE a.job_id = job.id), 0)
           + 1,
       job.started_at, job.worker_id, '', '', ''
FROM {source} AS job
WHERE {where}
ON CONFLICT DO NOTHING"""


def _opening_attempts(claim_sql: str) -> str:
    """PostgreSQL: a claim (``UPDATE … RETURNING *``) that opens its jobs' attempts in the
    same statement; it returns the claimed jobs as the claim alone does."""
    opened = _OPEN_ATTEMPT.format(source="claimed", where="true")
    return f"WITH claimed AS ({claim_sql}), opened AS ({opened})\nSELECT * FROM claimed"


def _open_claimed_attempts(db: str, job_ids: list[int]) -> None:
    """SQLite (no data-modifying WITH): open the attempts of the jobs just claimed; call it
    in the claim's transaction."""
    if not job_ids:
        return
    names = [f"id{i}" for i in range(len(job_ids))]
    where = f"job.id IN ({', '.join(f'%({n})s' for n in names)})"
    with connections[db].cursor() as cursor:
        sql = _OPEN_ATTEMPT.format(source="studyqueue_studyquestionjob", where=where)
        cursor.execute(sql, dict(zip(names, job_ids, strict=True)))


class _Reported(Protocol):
    """What a reply reports (``services.llm.LLMReply``)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def first_token_ms(self) -> int | None: ...
    @property
    def endpoint(self) -> str: ...


@dataclass(frozen=True)
class Usage:
    """What an attempt's LLM call reported, when it got a reply."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_token_ms: int | None = None
    endpoint: str = ""  # the server that answered (the last call's)

    @classmethod
    def of(cls, replies: Sequence[_Reported]) -> Usage | None:
        """What several calls of one attempt reported (the key audit's samples): their
        tokens summed (None when no call said), the first call's time to first token."""
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


def _open_attempts(db: str) -> QuerySet[JobAttempt]:
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
        values: dict[str, Any] = {
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "error_code": self.error_code,
            "error_message": self.error_message,
        }
        if self.usage is not None:
            values.update(
                prompt_tokens=self.usage.prompt_tokens,
                completion_tokens=self.usage.completion_tokens,
                first_token_ms=self.usage.first_token_ms,
                endpoint=self.usage.endpoint,
            )
        return values


def _end_attempt(db: str, job_id: int, ending: AttemptEnding) -> None:
    """End the job's open attempt. Call it only after the job's fenced write applied, in its
    transaction: the open attempt is then the caller's own claim's."""
    _open_attempts(db).filter(job_id=job_id).update(**ending.values())


# A job's fenced UPDATE (``{job}``, RETURNING its id) and its open attempt's close, in one
# statement: both apply or neither, in one round trip (and one commit, outside a transaction).
_FINISH_WITH_ATTEMPT = """
WITH job AS ({job}),
closed AS (
    UPDATE studyqueue_jobattempt SET {closing}
    WHERE job_id IN (SELECT id FROM job) AND ended_at IS NULL
)
SELECT count(*) FROM job"""


def _finish_with_attempt(
    db: str, job_update: tuple[str, dict[str, Any]], ending: AttemptEnding
) -> bool:
    """PostgreSQL: run a job's fenced ``UPDATE … RETURNING id`` (SQL and parameters) and, if
    it applied, close the job's open attempt in the same statement (as ``_end_attempt``
    does). Whether the job's update applied."""
    closing, params = assignments(JobAttempt, ending.values(), db, prefix="attempt_")
    sql, job_params = job_update
    with connections[db].cursor() as cursor:
        cursor.execute(
            _FINISH_WITH_ATTEMPT.format(job=sql, closing=closing), {**job_params, **params}
        )
        row = cursor.fetchone()
    return bool(row and row[0] == 1)


def _end_attempts(
    db: str,
    jobs: list[int] | QuerySet[Any, Any],
    outcome: Outcome,
    *,
    ended_at: datetime,
    error_code: str,
    error_message: str,
) -> int:
    """End the open attempts of many jobs (ids, or a QuerySet of their ids run as a
    subquery) in one statement: an operator's skip, the stale scan. How many."""
    if isinstance(jobs, list) and not jobs:
        return 0
    return (
        _open_attempts(db)
        .filter(job_id__in=jobs)
        .update(
            ended_at=ended_at, outcome=outcome, error_code=error_code, error_message=error_message
        )
    )


def attempts_of(job_id: int, last: int | None = None) -> list[JobAttempt]:
    """A job's attempts, first to last; with ``last``, only the last ``last``."""
    rows = JobAttempt.objects.filter(job_id=job_id)
    if last is None:
        return list(rows.order_by("number"))
    return list(reversed(rows.order_by("-number")[:last]))


# The claim: ``JobQuerySet.ready()`` in SQL, taken and marked in one statement. A single
# statement is atomic on both databases without a transaction (there is no async
# ``atomic()``). On PostgreSQL, SKIP LOCKED lets consumers pass each other's rows instead
# of queueing behind them, and ``= ANY(ARRAY(…))`` runs the SELECT once as an init plan
# (``IN (…)`` plans a slower semi-join); SQLite serialises writers and has neither.
# Status literals are inlined so that the planner matches the partial index
# ``studyqueue_job_claim`` (priority, deadline, id): a later priority is taken only when no
# earlier one is ready (``models.KIND_PRIORITY``); within one, a job whose question's set has a
# deadline goes first, the earliest first, then by age (``set_deadlines``).
# tests/queue/test_transitions.py checks that it takes exactly ready().
# An explanation job waits while its question's key audit runs first, or (KEY_AUDIT_HOLDS) while
# its disputed key waits for a reviewer: ``models.waiting_for_key_audit``.
_READY_IDS = """
    SELECT id FROM studyqueue_studyquestionjob AS job
    WHERE status = 'pending' AND run_after <= %(now)s AND attempts < max_attempts
      AND NOT EXISTS (
        SELECT 1 FROM studyqueue_queuepause AS pause WHERE pause.kind IN ('', job.kind)
      )
      AND NOT (job.kind = 'explanation' AND (
        EXISTS (
          SELECT 1 FROM studyqueue_studyquestionjob AS audit
          WHERE audit.study_question_id = job.study_question_id AND audit.kind = 'key_audit'
            AND (audit.status = 'processing'
                 OR (audit.status = 'pending' AND audit.attempts < audit.max_attempts
                     AND NOT EXISTS (
                       SELECT 1 FROM studyqueue_queuepause AS audit_pause
                       WHERE audit_pause.kind = 'key_audit')))
        )
        OR (%(holds)s AND EXISTS (
          SELECT 1 FROM studyqueue_studyquestion AS held
          WHERE held.id = job.study_question_id AND held.key_audit = 'disputed'
            AND held.key_check = ''
        ))
      ))
    ORDER BY {order}
    LIMIT %(limit)s"""
# Jobs with a deadline first, the earliest first: PostgreSQL sorts NULLs last in ascending
# order, as the index holds them; SQLite sorts them first, and has no index order to match.
_ORDER = {
    "postgresql": "priority, deadline, id",
    "sqlite": "priority, deadline IS NULL, deadline, id",
}
_CLAIM = """
UPDATE studyqueue_studyquestionjob
SET status = 'processing',
    attempts = attempts + 1,
    claim_token = %(token)s,
    worker_id = %(worker_id)s,
    started_at = %(now)s,
    heartbeat_at = %(now)s,
    completed_at = NULL
WHERE {ids}
RETURNING *
"""
# Each claim opens its jobs' attempts (``JobAttempt``): on PostgreSQL in the same statement
# (``_opening_attempts``), on SQLite by a second one in the claim's transaction.
CLAIM_SQL = {
    "postgresql": _opening_attempts(
        _CLAIM.format(
            ids="id = ANY(ARRAY({ready}\n    FOR UPDATE SKIP LOCKED))".format(
                ready=_READY_IDS.format(order=_ORDER["postgresql"])
            )
        )
    ),
    "sqlite": _CLAIM.format(ids="id IN ({})".format(_READY_IDS.format(order=_ORDER["sqlite"]))),
}
# One given job, for an operator who runs it now (``manage.py explain``): not before its
# turn in the queue matters, nor a pause; attempts and the fence are as for any claim.
_CLAIM_ONE = _CLAIM.format(ids="id = %(job_id)s AND status = 'pending' AND attempts < max_attempts")
CLAIM_ONE_SQL = {"postgresql": _opening_attempts(_CLAIM_ONE), "sqlite": _CLAIM_ONE}


# --------------------------------------------------------------------------- helpers


def _log(event: str, job: Job, level: int = logging.INFO, **extra: Any) -> None:
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


def _clip(message: str) -> str:
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[: MAX_ERROR_MESSAGE - 3] + "..."


def _db_value(field_name: str, value: Any, db: str) -> Any:
    """A Python value as the database wants it for the job's ``field_name``."""
    return db_value(Job, field_name, value, db)


def _fenced_update(job: Job, values: dict[str, Any]) -> bool:
    """Apply ``values`` only while the job is still processing under the caller's claim."""
    changed = Job.objects.filter(
        pk=job.pk, status=JobStatus.PROCESSING, claim_token=job.claim_token
    )
    return changed.update(**values) == 1


def _fenced_update_sql(job: Job, values: dict[str, Any], db: str) -> tuple[str, dict[str, Any]]:
    """``_fenced_update`` as one raw ``UPDATE … RETURNING id`` (SQL, parameters), for a
    statement that does more with the job it updated (``_finish_with_attempt``)."""
    sets, params = assignments(Job, values, db, prefix="job_")
    params.update(fence_id=job.pk, fence_token=_db_value("claim_token", job.claim_token, db))
    sql = (
        f"UPDATE {connections[db].ops.quote_name(Job._meta.db_table)} SET {sets}"
        f" WHERE id = %(fence_id)s AND status = '{JobStatus.PROCESSING}'"
        " AND claim_token = %(fence_token)s RETURNING id"
    )
    return sql, params


# --------------------------------------------------------------------------- enqueue


def _validate_kind(kind: str) -> str:
    if kind not in JobKind.values:
        raise EnqueueError(
            f"unknown job kind {kind!r}; expected one of {', '.join(JobKind.values)}"
        )
    return kind


@dataclass(frozen=True)
class EnqueueResult:
    """The active job for a (question, kind) and whether this call created it."""

    job: Job
    created: bool


def enqueue(
    question: StudyQuestion | int,
    kind: str = JobKind.EXPLANATION,
    *,
    run_after: datetime | None = None,
) -> EnqueueResult:
    """Queue a job for ``question``; idempotent: returns the active job if there is one."""
    _validate_kind(kind)
    question_id = question.pk if isinstance(question, StudyQuestion) else int(question)
    if not StudyQuestion.objects.filter(pk=question_id).exists():
        raise EnqueueError(f"study question {question_id} does not exist")
    owner = {"study_question_id": question_id}
    return _insert_active(owner, kind, run_after, f"question {question_id}")


def enqueue_set_notice(set_id: int) -> EnqueueResult:
    """Queue the notice that question set ``set_id`` is done (``workers.set_notice``);
    idempotent: returns the active one if there is one."""
    return _insert_active({"question_set_id": set_id}, JobKind.SET_NOTICE, None, f"set {set_id}")


def _earliest_deadline() -> Subquery:
    """The earliest deadline among the sets of the job's question (``OuterRef``)."""
    sets = StudyQuestionSet.objects.filter(
        questions=OuterRef("study_question_id"), deadline__isnull=False
    )
    return Subquery(sets.order_by("deadline").values("deadline")[:1])


def _deadline_of(question_id: int | None) -> datetime | None:
    """The earliest deadline among the sets of question ``question_id``."""
    if question_id is None:
        return None
    sets = StudyQuestionSet.objects.filter(questions=question_id, deadline__isnull=False)
    return sets.aggregate(first=Min("deadline"))["first"]


def set_deadlines(question_ids: Iterable[int]) -> int:
    """Give the active jobs of these questions the earliest deadline of their sets again (a
    set's deadline changed, or they joined a set): the claim order follows; how many jobs."""
    jobs = Job.objects.all()
    ids = sorted({int(i) for i in question_ids})
    changed = 0
    for start in range(0, len(ids), operator_batch(jobs.db)):
        chunk = ids[start : start + operator_batch(jobs.db)]
        changed += (
            jobs.active().filter(study_question_id__in=chunk).update(deadline=_earliest_deadline())
        )
    return changed


def _insert_active(
    owner: dict[str, int], kind: str, run_after: datetime | None, named: str
) -> EnqueueResult:
    """Insert an active job of ``kind`` for ``owner`` (its question or its set), or return
    the active one there is."""
    jobs = Job.objects.all()
    now = timezone.now()
    # The partial unique constraint is the arbiter: try to insert, and on a conflict
    # return the job that won. Loop because that job may finish in between.
    for _ in range(5):
        try:
            with transaction.atomic(using=jobs.db):
                job = jobs.create(
                    **owner,
                    kind=kind,
                    priority=kind_priority(kind),
                    deadline=_deadline_of(owner.get("study_question_id")),
                    created_at=now,
                    run_after=run_after or now,
                )
        except IntegrityError:
            existing = jobs.active().filter(**owner, kind=kind).first()
            if existing is not None:
                return EnqueueResult(existing, created=False)
            continue
        _log("enqueued", job)
        notify.send(notify.wake(), using=jobs.db)
        return EnqueueResult(job, created=True)
    raise EnqueueError(f"could not enqueue {named}: conflicting writes kept winning")


# Bulk enqueue as INSERT … SELECT from the question table: ids of missing questions match
# no row, the partial unique constraint skips questions that have an active job, and the
# database builds the rows. PostgreSQL takes the ids as one array parameter.
ENQUEUE_MANY_SQL = """
INSERT INTO studyqueue_studyquestionjob
    (study_question_id, kind, priority, deadline, status, attempts, max_attempts,
     free_releases, error_code, error_message, created_at, run_after, worker_id)
SELECT id, %(kind)s, %(priority)s,
    (SELECT MIN(qset.deadline) FROM studyqueue_studyquestionset AS qset
     JOIN studyqueue_studyquestionset_questions AS member
       ON member.studyquestionset_id = qset.id
     WHERE member.studyquestion_id = studyqueue_studyquestion.id),
    'pending', 0, %(max_attempts)s, 0, '', '', %(now)s, %(now)s, ''
FROM studyqueue_studyquestion
WHERE {ids}
ON CONFLICT DO NOTHING
"""


def enqueue_many(question_ids: Iterable[int], kind: str = JobKind.EXPLANATION) -> int:
    """Queue jobs for many questions in bulk; returns how many jobs were created.

    Questions that already have an active job of this kind, and ids of questions
    that do not exist, are left alone.
    """
    _validate_kind(kind)
    db = Job.objects.all().db  # the raw SQL runs where the job queryset would
    connection = connections[db]
    ids = sorted({int(i) for i in question_ids})
    params: dict[str, Any] = {
        "kind": kind,
        "priority": kind_priority(kind),
        "max_attempts": conf.MAX_ATTEMPTS,
        "now": _db_value("created_at", timezone.now(), db),
    }
    postgres = connection.vendor == "postgresql"
    batch = 50_000 if postgres else 500  # SQLite: stay under its bound-parameter limit
    created = 0
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        chunk_params: dict[str, Any]
        if postgres:
            where, chunk_params = "id = ANY(%(ids)s)", {"ids": chunk}
        else:
            names = [f"id{i}" for i in range(len(chunk))]
            where = f"id IN ({', '.join(f'%({n})s' for n in names)})"
            chunk_params = dict(zip(names, chunk, strict=True))
        with connection.cursor() as cursor:
            cursor.execute(ENQUEUE_MANY_SQL.format(ids=where), {**params, **chunk_params})
            created += cursor.rowcount
    logger.info("study_jobs_enqueued kind=%s requested=%s created=%s", kind, len(ids), created)
    if created:
        notify.send(notify.wake(), using=db)
    return created


# --------------------------------------------------------------------------- consumer side


def _run_claim(sqls: dict[str, str], worker_id: str, **params: Any) -> list[Job]:
    """Run a claim statement (by vendor) with a fresh claim token, opening the claimed jobs'
    attempts; the claimed jobs in the order they were taken (priority, then id)."""
    db = Job.objects.all().db  # where ``Job.objects.raw`` runs it: parameters adapted for it
    params.update(
        token=_db_value("claim_token", uuid.uuid4(), db),
        worker_id=fit(Job, "worker_id", worker_id),
        now=_db_value("started_at", timezone.now(), db),
    )
    vendor = connections[db].vendor
    claimed = Job.objects.raw(sqls[vendor], params)  # runs when read
    if vendor == "postgresql":  # one statement: atomic as it is
        jobs = list(claimed)
    else:
        with transaction.atomic(using=db):
            jobs = list(claimed)
            _open_claimed_attempts(db, [job.pk for job in jobs])
    jobs.sort(key=lambda job: (job.priority, job.pk))
    for job in jobs:
        _log("claimed", job, worker=worker_id)
    return jobs


def claim(*, worker_id: str, limit: int | None = None) -> list[Job]:
    """Atomically claim up to ``limit`` ready jobs in id order for ``worker_id``.

    Counts the attempt, stamps a fresh claim token and heartbeat (``CLAIM_SQL``).
    """
    limit = conf.BATCH_SIZE if limit is None else limit
    if limit < 1:
        return []
    return _run_claim(CLAIM_SQL, worker_id, limit=limit, holds=key_audit_holds())


def claim_job(job_id: int, *, worker_id: str) -> Job | None:
    """Claim one given pending job (``CLAIM_ONE_SQL``); None if it is not claimable."""
    jobs = _run_claim(CLAIM_ONE_SQL, worker_id, job_id=job_id)
    return jobs[0] if jobs else None


# Set on a job its caller created and claimed to run itself (``claim_new``): it is never
# handed to a consumer, which may write with other settings than the caller's.
_OWN_RUN = "_studyqueue_own_run"


def claim_new(question_id: int, kind: str = JobKind.EXPLANATION, *, worker_id: str) -> Job | None:
    """Create a job already claimed by ``worker_id``, for a caller that runs it at once
    (``manage.py explain``): no consumer ever sees it pending. Should it not complete, the
    transition that would make it pending again (a release, a retry) ends it ``skipped``
    instead, in the same fenced write (``_finish``). None when the question has an active
    job of this kind (the caller takes that one as it is)."""
    _validate_kind(kind)
    jobs = Job.objects.all()
    now = timezone.now()
    try:
        with transaction.atomic(using=jobs.db):
            job = jobs.create(
                study_question_id=question_id, kind=kind, created_at=now, run_after=now
            )
            claimed = claim_job(job.pk, worker_id=worker_id)  # no NOTIFY: nobody else's
    except IntegrityError:
        return None
    assert claimed is not None, "a job created pending in this transaction is claimable"
    setattr(claimed, _OWN_RUN, True)
    return claimed


def _withheld(job: Job, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` that would make a caller's own job (``claim_new``) pending again, made to
    end it skipped, with the error or reason that would have sent it back (a stop, a
    quality retry: no error code)."""
    if values.get("status") != JobStatus.PENDING or not getattr(job, _OWN_RUN, False):
        return values
    return {
        **values,
        "status": JobStatus.SKIPPED,
        "completed_at": timezone.now(),
        "error_message": values.get("error_message") or "stopped before it completed",
    }


def heartbeat(job: Job) -> bool:
    """Refresh a claimed job's liveness; False if the claim is no longer ours."""
    now = timezone.now()
    applied = _fenced_update(job, {"heartbeat_at": now})
    if applied:
        job.heartbeat_at = now
    else:
        _log("heartbeat_refused", job, level=logging.WARNING)
    return applied


def _finish(
    job: Job,
    event: str,
    values: dict[str, Any],
    outcome: Outcome,
    level: int = logging.INFO,
    usage: Usage | None = None,
) -> Outcome:
    """Apply a fenced transition and close the claim's attempt with it, both or neither;
    ``outcome`` if it applied, else ``Outcome.LOST`` (and nothing is written). A caller's
    own job (``claim_new``) never goes back to pending: it ends skipped."""
    db = job._state.db
    assert db is not None, "a claimed job was read from the database"
    withheld = _withheld(job, values)
    if withheld is not values:
        event, values = "withheld", withheld
    ending = AttemptEnding(
        Outcome(outcome),
        ended_at=values.get("completed_at") or timezone.now(),
        error_code=values.get("error_code", ""),
        error_message=values.get("error_message", ""),
        usage=usage,
    )
    if connections[db].vendor == "postgresql":
        # One statement: atomic as it is, one round trip, and outside a caller's
        # transaction one commit (the consumer's hot path: every job ends here).
        applied = _finish_with_attempt(db, _fenced_update_sql(job, values, db), ending)
    else:
        # No savepoint: inside a caller's transaction (store) the two share its fate.
        with transaction.atomic(using=db, savepoint=False):
            applied = _fenced_update(job, values)
            if applied:
                _end_attempt(db, job.pk, ending)
    if not applied:
        _log(f"{event}_refused", job, level=logging.WARNING, reason="claim_lost")
        return Outcome.LOST

    def committed() -> None:
        # Only once the write is durable: inside a transaction that later rolls back
        # (the connection dies before COMMIT) the job keeps its claim token, so that
        # this worker can still record what happened, and no false line is logged.
        for name, value in values.items():
            setattr(job, name, value)
        _log(event, job, level=level)

    # Outside a transaction (the statement committed) this runs at once.
    transaction.on_commit(committed, using=db)
    return outcome


def complete(
    job: Job,
    *,
    revision: ExplanationRevision | None = None,
    llm_ms: int | None = None,
    usage: Usage | None = None,
) -> Outcome:
    """Mark a claimed job completed with its revision (the one its reply became, or the
    one it checked), its LLM time and what its calls reported (``usage``; by default, what
    the revision's reply reported: a check passes its own): ``COMPLETED``, or ``LOST`` if the
    claim was lost."""
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
    """What the attempt's reply reported, from the revision it became."""
    if revision is None:
        return None
    return Usage(
        prompt_tokens=revision.prompt_tokens,
        completion_tokens=revision.completion_tokens,
        first_token_ms=revision.first_token_ms,
        endpoint=revision.endpoint,
    )


def retry_for_quality(
    job: Job,
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
        "error_message": _clip(reason),
    }
    return _finish(job, "quality_retry", values, Outcome.RETRYING, usage=_usage(revision))


def fail(job: Job, code: str, message: str = "", *, retry_after: float | None = None) -> Outcome:
    """Record a failed attempt, counted: ``RETRYING``, ``FAILED``, or ``LOST`` if the claim
    was lost. Whether it retries and when is the policy's (``retry.decide``)."""
    failure = policy.Failure(ErrorCode(code), message, retry_after=retry_after)
    return apply(job, failure, policy.decide(failure, job))


def apply(job: Job, failure: policy.Failure, decision: policy.Decision) -> Outcome:
    """Write what ``retry.decide`` answered for ``failure``: a hand-back (``RELEASED``), a
    retry after the decision's delay (``RETRYING``) or the end (``FAILED``); ``LOST`` if the
    claim was lost. A flagged reply's decision is the revision's to write
    (``revisions.Written``)."""
    if decision.action is policy.Action.RELEASE:
        return release(
            job,
            delay=decision.delay,
            code=failure.code,
            message=failure.message,
            reached_server=failure.reached_server,
        )
    if failure.flagged or decision.action is policy.Action.COMPLETE:
        raise ValueError("a flagged reply is written with its revision (revisions.Written)")
    if not failure.job_at_fault or failure.affects_all:
        # Handed back for free as often as the policy allows: from now on it counts.
        _log("release_limit", job, logging.WARNING, free_releases=job.free_releases)
    now = timezone.now()
    values: dict[str, Any] = {
        "error_code": ErrorCode(failure.code),
        "error_message": _clip(failure.message),
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
    job: Job,
    *,
    delay: float = 0.0,
    code: str = "",
    message: str = "",
    reached_server: bool = False,
) -> Outcome:
    """Put a claimed job back to pending without counting the attempt: ``RELEASED``, or
    ``LOST``.

    For failures that are not the job's fault (the LLM server is down or overloaded,
    the consumer is stopping): the job waits ``delay`` seconds and keeps all its
    attempts. ``reached_server``: the call got to the server (which then failed as a
    whole); such releases are counted in ``free_releases``, which the policy bounds
    (``retry.RetryStrategy.release_is_free``).
    """
    values: dict[str, Any] = {
        "status": JobStatus.PENDING,
        # Under the fence nobody else can change these: undo the claim's count.
        "attempts": job.attempts - 1,
        "free_releases": job.free_releases + 1 if reached_server else job.free_releases,
        "run_after": timezone.now() + timedelta(seconds=max(0.0, delay)),
        "claim_token": None,
        "error_code": ErrorCode(code) if code else "",
        "error_message": _clip(message),
    }
    return _finish(job, "released", values, Outcome.RELEASED)


def _skipped(code: str, message: str) -> dict[str, Any]:
    """The fields a skip sets, by the consumer (``skip_claimed``) or an operator (``skip``)."""
    return {
        "status": JobStatus.SKIPPED,
        "error_code": ErrorCode(code),
        "error_message": _clip(message),
        "completed_at": timezone.now(),
        "claim_token": None,
    }


def skip_claimed(job: Job, code: str, message: str = "") -> Outcome:
    """Mark a claimed job skipped (e.g. a reserved or unknown kind); fenced: ``SKIPPED``, or
    ``LOST``."""
    values = _skipped(code, message)
    return _finish(job, "skipped", values, Outcome.SKIPPED)


# --------------------------------------------------------------------------- operator side


# Operator actions work on sets of rows, this many ids per statement (SQLite: its
# bound-parameter limit): 35,000 jobs take a few dozen statements, not ~100,000.
OPERATOR_BATCH = 500
OPERATOR_BATCH_POSTGRES = 5000
_RETRYABLE = (JobStatus.FAILED, JobStatus.SKIPPED)


def operator_batch(db: str) -> int:
    """Ids per statement of an operator action on database ``db``."""
    postgres = connections[db].vendor == "postgresql"
    return OPERATOR_BATCH_POSTGRES if postgres else OPERATOR_BATCH


def _batches(ids: list[int], db: str) -> Iterable[list[int]]:
    size = operator_batch(db)
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


def _log_set(event: str, ids: list[int], level: int = logging.INFO, **extra: Any) -> None:
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
    missing: list[int] = field(default_factory=list)
    # For each conflict, the active job of its pair (None: it ended meanwhile), so that a
    # refusal can name the job that stands in the way.
    active_for: dict[int, int | None] = field(default_factory=dict)


def refusals(active_for: dict[int, int | None], limit: int = 10) -> str:
    """Refused jobs and the active job each would have doubled, ``12 → 40, 13 → 41``; at
    most ``limit`` pairs, then ``…``."""
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
    """Operator retry: failed or skipped jobs back to pending with attempts reset.

    Refused for pending, processing and completed jobs, and for a job whose
    (question, kind) already has an active job: retry never makes a second one (of two
    selected jobs of one pair, the older is retried). Set-based, ``OPERATOR_BATCH`` ids
    per statement (``operator_batch``); call it inside a transaction to make it
    all-or-nothing.
    """
    jobs = Job.objects.all()
    result = RetryResult()
    for chunk in _batches(sorted({int(i) for i in job_ids}), jobs.db):
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
    known = {row[0] for row in rows}
    result.missing += [i for i in chunk if i not in known]
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
            continue
        if question is not None:
            taken.add((question, kind))
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
    _log_set("retried", chosen)
    _log_set("retry_refused", wrong, logging.WARNING, reason="wrong_state")
    _log_set("retry_refused", conflicts, logging.WARNING, reason="active_job_exists")


@dataclass
class SkipResult:
    """Outcome of an operator skip, by job id."""

    skipped: list[int] = field(default_factory=list)
    wrong_state: list[int] = field(default_factory=list)  # already finished, or unknown


def skip(
    job_ids: Iterable[int],
    *,
    code: str = ErrorCode.OPERATOR_SKIPPED,
    message: str = "Skipped by an operator",
) -> SkipResult:
    """Operator skip: pending or processing jobs become skipped.

    A processing job's worker is fenced out: its later writes find the job no
    longer processing and change nothing. Set-based, ``operator_batch`` ids per statement.
    """
    jobs = Job.objects.all()
    db = jobs.db
    result = SkipResult()
    values = _skipped(code, message)
    for chunk in _batches(sorted({int(i) for i in job_ids}), db):
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
            _end_attempts(
                db,
                processing,
                Outcome.SKIPPED,
                ended_at=values["completed_at"],
                error_code=values["error_code"],
                error_message=values["error_message"],
            )
        result.skipped += done
        result.wrong_state += [i for i in chunk if i not in running]
        _log_set("skipped", done, error_code=code)
    return result


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
    message: str = "",
) -> StaleResult:
    """Processing jobs with no heartbeat for ``older_than`` go back to pending.

    A job that has used all its attempts ends ``failed`` with ``stale`` instead, so
    a job that keeps killing its worker cannot loop forever. Clearing the claim
    token fences out the old worker should it wake up. ``job_ids`` limits the scan
    to those jobs (the admin's action on a selection).
    """
    if older_than is None:
        older_than = timedelta(minutes=conf.STALE_MINUTES)
    now = timezone.now()
    stale = Job.objects.stale(now - older_than)
    if job_ids is not None:
        stale = stale.filter(pk__in=sorted({int(i) for i in job_ids}))
    if not dry_run and not stale.exists():
        return StaleResult(reset=0, failed=0)  # the usual case: one cheap index probe
    if dry_run:
        failed_count = stale.filter(attempts__gte=F("max_attempts")).count()
        return StaleResult(reset=stale.count() - failed_count, failed=failed_count)
    message = message or f"no heartbeat for {older_than.total_seconds():.0f}s; worker presumed dead"
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
        _end_attempts(
            db, stale.values("pk"), Outcome.STALE, ended_at=now,
            error_code=ErrorCode.STALE, error_message=message,
        )  # fmt: skip
        Job.objects.filter(pk__in=failed_ids).update(
            status=JobStatus.FAILED, completed_at=now, **common
        )
        Job.objects.filter(pk__in=reset_ids).update(
            status=JobStatus.PENDING, run_after=now, started_at=None, heartbeat_at=None, **common
        )
    if failed_ids or reset_ids:
        for job in Job.objects.filter(pk__in=failed_ids + reset_ids):
            _log("stale_failed" if job.pk in failed_ids else "stale_reset", job, logging.WARNING)
    return StaleResult(
        reset=len(reset_ids), failed=len(failed_ids), reset_ids=reset_ids, failed_ids=failed_ids
    )


# The worker id of a ``manage.py explain`` run: this prefix, then ``host:pid``.
EXPLAIN_WORKER_PREFIX = "explain@"


def reset_dead_explains() -> StaleResult:
    """Processing jobs of a ``manage.py explain`` on this host whose process is gone
    (SIGKILL, the OOM killer) are stale at once, not after ``STALE_MINUTES``: its pid is in
    its worker id, and a pid no process has will send no heartbeat. A pid taken since by
    another process looks alive: that job waits for the stale timeout as before."""
    prefix = f"{EXPLAIN_WORKER_PREFIX}{socket.gethostname()}:"
    claimed = Job.objects.processing().filter(worker_id__startswith=prefix)
    dead: dict[int, str] = {}
    for pk, worker_id in claimed.values_list("pk", "worker_id"):
        pid = worker_id.removeprefix(prefix)
        if pid.isdecimal() and not _process_exists(int(pid)):
            dead[pk] = pid
    if not dead:
        return StaleResult(reset=0, failed=0)
    pids = ", ".join(sorted(set(dead.values())))
    return reset_stale(
        older_than=timedelta(0),
        job_ids=dead,
        message=f"its manage.py explain process (pid {pids}) is gone",
    )


def _process_exists(pid: int) -> bool:
    """Whether a process with this pid exists on this host (signal 0 asks, sends nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True


def prune_finished(*, older_than: timedelta) -> int:
    """Delete finished (completed, failed, skipped) jobs that ended before ``older_than`` ago."""
    cutoff = timezone.now() - older_than
    # Their attempts go with them (CASCADE); the count is of jobs.
    _, per_model = Job.objects.finished().filter(completed_at__lt=cutoff).delete()
    deleted = per_model.get(Job._meta.label, 0)
    logger.info("study_jobs_pruned count=%s older_than_days=%s", deleted, older_than.days)
    return deleted


# --------------------------------------------------------------------------- pause


def pause(kind: str = "", *, reason: str = "", by: str = "") -> tuple[QueuePause, bool]:
    """Pause the queue for ``kind`` (blank: every kind); idempotent, keeps the first pause.
    The pause, and whether this call made it.

    Consumers claim nothing of it from their next claim on (the claim checks the pauses),
    and hand back at once the jobs they claimed but have not started calling the LLM for
    (told by ``NOTIFY`` on PostgreSQL, seen by the cycle on SQLite); running calls finish;
    enqueueing goes on. The pause lasts until ``resume``.
    """
    if kind:
        _validate_kind(kind)
    pauses = QueuePause.objects.all()
    row, created = pauses.get_or_create(
        kind=kind,
        defaults={
            "reason": fit(QueuePause, "reason", reason),
            "paused_by": fit(QueuePause, "paused_by", by),
        },
    )
    if created:
        logger.warning(
            "study_queue_paused kind=%s by=%s reason=%r", kind or "all", by or "-", reason
        )
        notify.send(notify.pause(kind), using=pauses.db)
    return row, created


def resume(kind: str = "") -> bool:
    """Lift the pause for ``kind`` (blank: the pause of every kind); whether there was one."""
    pauses = QueuePause.objects.filter(kind=kind)
    deleted, _ = pauses.delete()
    if deleted:
        logger.warning("study_queue_resumed kind=%s", kind or "all")
        notify.send(notify.wake(), using=pauses.db)  # idle consumers claim at once
    return bool(deleted)


def _paused() -> QuerySet[QueuePause, str]:
    return QueuePause.objects.values_list("kind", flat=True)


def paused_kinds() -> list[str]:
    """The paused kinds (``""`` stands for every kind)."""
    return list(_paused())


async def apaused_kinds() -> list[str]:
    """``paused_kinds()`` through the async ORM."""
    return [kind async for kind in _paused()]


def is_paused(kind: str, paused: Iterable[str]) -> bool:
    """Whether ``kind`` is among ``paused`` (``paused_kinds()``), directly or as every kind."""
    return any(p in ("", kind) for p in paused)


def _run_afters() -> QuerySet[Job, datetime]:
    return Job.objects.claimable().order_by("run_after").values_list("run_after", flat=True)


def _due_in(first: datetime | None, now: datetime | None) -> float | None:
    if first is None:
        return None
    return max(0.0, (first - (now or timezone.now())).total_seconds())


def next_due_in(now: datetime | None = None) -> float | None:
    """Seconds until the earliest claimable job is due (0: one is ready); None if none."""
    return _due_in(_run_afters().first(), now)


async def anext_due_in(now: datetime | None = None) -> float | None:
    """``next_due_in()`` through the async ORM."""
    return _due_in(await _run_afters().afirst(), now)


def has_ready(now: datetime | None = None) -> bool:
    """Whether a job is ready to claim now (what ``claim`` would take)."""
    return Job.objects.ready(now or timezone.now()).exists()
