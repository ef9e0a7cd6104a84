"""The job state machine: every status write in studyqueue goes through this module.

Consumer-side functions (``heartbeat``, ``complete``, ``fail``, ``release``,
``skip_claimed``) are *fenced*: they apply only while the job is still
``processing`` under the claim token the caller holds, and return whether they
applied. A worker whose job was reset as stale and claimed again writes nothing.

Operator-side functions (``retry``, ``skip``, ``reset_stale``) take job ids or
thresholds and return what they changed. Every function has an ``a``-prefixed
async twin that runs it on Django's sync thread.
"""

from __future__ import annotations

import functools
import logging
import random
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import IntegrityError, NotSupportedError, connections, router, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import F
from django.utils import timezone
from psycopg import pq

from studyqueue.conf import conf
from studyqueue.exceptions import EnqueueError
from studyqueue.models import (
    ACTIVE_STATUSES,
    TRANSIENT_ERRORS,
    ErrorCode,
    JobKind,
    JobStatus,
    StudyQuestion,
    StudyQuestionJob,
)

logger = logging.getLogger("studyqueue.queue")

Job = StudyQuestionJob
P = ParamSpec("P")
R = TypeVar("R")

MAX_ERROR_MESSAGE = 2000
NOTIFY_CHANNEL = "studyqueue_jobs"


# --------------------------------------------------------------------------- helpers


def _async(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """The async twin of a sync queue function (runs on Django's sync thread)."""

    runner = sync_to_async(fn, thread_sensitive=True)  # built once: it inspects fn

    @functools.wraps(fn)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await runner(*args, **kwargs)

    twin.__name__ = twin.__qualname__ = f"a{fn.__name__}"
    return twin


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


def _db() -> str:
    return router.db_for_write(Job)


def _notify(db: str) -> None:
    """Wake idle consumers (PostgreSQL LISTEN/NOTIFY; delivered when the transaction commits)."""
    connection = connections[db]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [NOTIFY_CHANNEL])


def _clip(message: str) -> str:
    return (
        message if len(message) <= MAX_ERROR_MESSAGE else message[: MAX_ERROR_MESSAGE - 3] + "..."
    )


def _prep(field_name: str, value: Any, connection: Any) -> Any:
    """A Python value as the database wants it for ``field_name`` (raw SQL params)."""
    return Job._meta.get_field(field_name).get_db_prep_value(value, connection)


def _returning_sql(connection: Any, set_sql: str, where_sql: str) -> str:
    """``UPDATE job SET … WHERE … RETURNING`` every column, in ``_ATTNAMES`` order."""
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in Job._meta.concrete_fields)
    return f"UPDATE {qn(Job._meta.db_table)} SET {set_sql} WHERE {where_sql} RETURNING {columns}"


def _update_returning(
    connection: Any, sql: str, params: list[Any], *, hot: bool = False
) -> list[Job]:
    """Run one ``UPDATE … RETURNING`` statement (see ``_returning_sql``); the rows it
    changed, as jobs in id order. ``hot``: a per-job statement (see ``_hot_cursor``).

    A single statement is atomic on both databases and needs no transaction, which
    is what lets the async consumer claim safely (there is no async ``atomic``).
    """
    db = connection.alias
    if hot:
        rows = _hot_execute(connection, sql, params).fetchall()
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    converters = _row_converters(connection)
    jobs = []
    for row in rows:
        values = list(row)
        for index, expression, funcs in converters:
            for func in funcs:
                values[index] = func(values[index], expression, connection)
        jobs.append(Job.from_db(db, _ATTNAMES, values))
    jobs.sort(key=lambda j: j.pk)
    return jobs


# Worked out once: column order of every RETURNING, and per connection the row
# converters and the kept per-job cursor.
_ATTNAMES = [f.attname for f in Job._meta.concrete_fields]
_converters: weakref.WeakKeyDictionary[Any, list[tuple[int, Any, list]]] = (
    weakref.WeakKeyDictionary()
)
_hot_cursors: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _hot_cursor(connection: Any) -> Any:
    """The cursor for the statements run once or twice per job (claim, fenced writes),
    kept open per connection for the next one.

    On PostgreSQL it binds parameters on the server (Django's default cursor quotes
    them into the SQL in Python), so that psycopg can prepare these fixed-shape
    statements when the connection allows it (``prepare_threshold``, set from
    DATABASE_PREPARED_STATEMENTS). Wrapped like Django's own cursors: database errors
    become ``django.db`` errors, health checks and execute wrappers apply.
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw_connection, cursor = _hot_cursors.get(connection, (None, None))
    if (
        raw_connection is connection.connection
        and not getattr(cursor.cursor, "closed", False)
        and connection.queries_logged == isinstance(cursor, CursorDebugWrapper)
    ):
        return cursor
    if connection.vendor == "postgresql":
        from django.db.backends.postgresql.base import ServerBindingCursor

        with connection.wrap_database_errors:
            raw = ServerBindingCursor(connection.connection)
        # Rows in binary: a claim returns five timestamps, and parsing their text
        # form was ~5% of the consumer's CPU per job (same values, same tzinfo).
        raw.format = pq.Format.BINARY
    else:
        with connection.wrap_database_errors:
            raw = connection.create_cursor()
    if connection.queries_logged:
        cursor = connection.make_debug_cursor(raw)
    else:
        cursor = connection.make_cursor(raw)
    _hot_cursors[connection] = (connection.connection, cursor)
    return cursor


def _hot_execute(connection: Any, sql: str, params: list[Any]) -> Any:
    """Run a per-job statement on the connection's kept cursor; the cursor."""
    cursor = _hot_cursor(connection)
    try:
        cursor.execute(sql, params)
    except NotSupportedError:
        # "cached plan must not change result type": a migration changed a column
        # under a prepared statement, which then fails for the rest of the session.
        # Retire the connection: Django replaces it before the next cycle.
        logger.warning("study_db_connection_retired reason=prepared_statement_invalidated")
        connection.close_at = time.monotonic()
        raise
    return cursor


def _row_converters(connection: Any) -> list[tuple[int, Any, list]]:
    """The backend's and the fields' value converters for a full job row (as the ORM
    applies them), for rows read with a plain cursor. Worked out once per connection."""
    cached = _converters.get(connection)
    if cached is not None:
        return cached
    out = []
    for index, model_field in enumerate(Job._meta.concrete_fields):
        expression = model_field.get_col(Job._meta.db_table)
        funcs = connection.ops.get_db_converters(expression) + model_field.get_db_converters(
            connection
        )
        if funcs:
            out.append((index, expression, funcs))
    _converters[connection] = out
    return out


_SQL: dict[tuple, str] = {}


def _cached_sql(connection: Any, key: tuple, build: Callable[[], str]) -> str:
    """Per-job statements are built once per database vendor, not on every call."""
    cache_key = (connection.vendor, *key)
    sql = _SQL.get(cache_key)
    if sql is None:
        sql = _SQL[cache_key] = build()
    return sql


def claim_select_sql(connection: Any) -> str:
    """The SELECT at the heart of ``claim`` (for ``EXPLAIN`` in tests and benchmarks);
    parameters: the time now, the limit."""
    qn = connection.ops.quote_name
    # Status literals are inlined, not parameters, so the planner can match the
    # partial index even for a generic (prepared) plan.
    lock = (
        " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    )
    return (
        f"SELECT {qn('id')} FROM {qn(Job._meta.db_table)}"
        f" WHERE {qn('status')} = '{JobStatus.PENDING.value}'"
        f" AND {qn('run_after')} <= %s AND {qn('attempts')} < {qn('max_attempts')}"
        f" ORDER BY {qn('id')} LIMIT %s{lock}"
    )


def _claim_sql(connection: Any) -> str:
    qn = connection.ops.quote_name
    if connection.vendor == "postgresql":
        # ARRAY(subquery) runs the locking SELECT once, as an init plan, and the update
        # finds its rows by primary key; "IN (subquery)" plans a semi-join instead
        # (measured: 0.09 vs 0.22 ms per claim).
        where = f"{qn('id')} = ANY(ARRAY({claim_select_sql(connection)}))"
    else:
        where = f"{qn('id')} IN ({claim_select_sql(connection)})"
    set_sql = (
        f"{qn('status')} = '{JobStatus.PROCESSING.value}', {qn('attempts')} = {qn('attempts')} + 1,"
        f" {qn('claim_token')} = %s, {qn('worker_id')} = %s, {qn('started_at')} = %s,"
        f" {qn('heartbeat_at')} = %s, {qn('completed_at')} = NULL"
    )
    return _returning_sql(connection, set_sql, where)


def backoff_seconds(attempts: int) -> float:
    """Delay before retry number ``attempts``: exponential, capped, with jitter."""
    base = conf.BACKOFF_BASE_SECONDS * (2 ** max(attempts - 1, 0))
    delay = min(base, conf.BACKOFF_MAX_SECONDS)
    jitter = conf.BACKOFF_JITTER
    return max(0.0, delay * (1 + random.uniform(-jitter, jitter)))


def _fenced_update(connection: Any, job: Job, values: dict[str, Any]) -> bool:
    """Apply ``values`` only while the job is still processing under the caller's claim.

    One hand-built statement: on this hot path (every heartbeat and every outcome) the
    ORM's query compilation cost more than the database round trip itself.
    """
    # NULLs go into the statement itself (one shape per pattern of NULLs, cached):
    # fewer parameters to adapt and send on every outcome.
    nulls = tuple(value is None for value in values.values())
    params = [
        Job._meta.get_field(name).get_db_prep_save(value, connection)
        for name, value in values.items()
        if value is not None
    ]
    params += [job.pk, _prep("claim_token", job.claim_token, connection)]

    def build() -> str:
        qn = connection.ops.quote_name
        sets = ", ".join(
            f"{qn(Job._meta.get_field(name).column)} = {'NULL' if null else '%s'}"
            for name, null in zip(values, nulls, strict=True)
        )
        return (
            f"UPDATE {qn(Job._meta.db_table)} SET {sets} WHERE {qn('id')} = %s"
            f" AND {qn('status')} = '{JobStatus.PROCESSING.value}' AND {qn('claim_token')} = %s"
        )

    sql = _cached_sql(connection, ("fenced", *values, *nulls), build)
    return _hot_execute(connection, sql, params).rowcount == 1


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
    db = _db()
    if not StudyQuestion.objects.using(db).filter(pk=question_id).exists():
        raise EnqueueError(f"study question {question_id} does not exist")
    now = timezone.now()
    # The partial unique constraint is the arbiter: try to insert, and on a conflict
    # return the job that won. Loop because that job may finish in between.
    for _ in range(5):
        try:
            with transaction.atomic(using=db):
                job = Job.objects.using(db).create(
                    study_question_id=question_id,
                    kind=kind,
                    created_at=now,
                    run_after=run_after or now,
                )
        except IntegrityError:
            existing = (
                Job.objects.using(db)
                .filter(study_question_id=question_id, kind=kind, status__in=ACTIVE_STATUSES)
                .first()
            )
            if existing is not None:
                return EnqueueResult(existing, created=False)
            continue
        _log("enqueued", job)
        _notify(db)
        return EnqueueResult(job, created=True)
    raise EnqueueError(f"could not enqueue question {question_id}: conflicting writes kept winning")


def enqueue_many(question_ids: Iterable[int], kind: str = JobKind.EXPLANATION) -> int:
    """Queue jobs for many questions in bulk; returns how many jobs were created.

    Questions that already have an active job of this kind, and ids of questions
    that do not exist, are left alone (conflict-safe: ``ON CONFLICT DO NOTHING``).
    """
    _validate_kind(kind)
    db = _db()
    connection = connections[db]
    qn = connection.ops.quote_name
    ids = sorted({int(i) for i in question_ids})
    now = _prep("created_at", timezone.now(), connection)
    columns = [
        "study_question_id", "kind", "status", "attempts", "max_attempts", "error_code",
        "error_message", "created_at", "run_after", "worker_id", "llm_model",
    ]  # fmt: skip
    # INSERT … SELECT from the question table: ids of missing questions simply match no
    # row, and the database builds the rows (one array parameter on PostgreSQL).
    select = (
        f"SELECT {qn('id')}, %s, '{JobStatus.PENDING.value}', 0, %s, '', '', %s, %s, '', ''"
        f" FROM {qn(StudyQuestion._meta.db_table)} WHERE {qn('id')}"
    )
    head = f"INSERT INTO {qn(Job._meta.db_table)} ({', '.join(qn(c) for c in columns)}) {select}"
    postgres = connection.vendor == "postgresql"
    batch = 50_000 if postgres else 500  # SQLite: stay under its bound-parameter limit
    created = 0
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        if postgres:
            where, chunk_params = " = ANY(%s)", [chunk]
        else:
            where, chunk_params = f" IN ({', '.join(['%s'] * len(chunk))})", chunk
        with connection.cursor() as cursor:
            cursor.execute(
                f"{head}{where} ON CONFLICT DO NOTHING",
                [kind, conf.MAX_ATTEMPTS, now, now, *chunk_params],
            )
            created += cursor.rowcount
    logger.info("study_jobs_enqueued kind=%s requested=%s created=%s", kind, len(ids), created)
    if created:
        _notify(db)
    return created


# --------------------------------------------------------------------------- consumer side


def claim(*, worker_id: str, limit: int | None = None) -> list[Job]:
    """Atomically claim up to ``limit`` ready jobs in id order for ``worker_id``.

    Counts the attempt, stamps a fresh claim token and heartbeat. On PostgreSQL one
    ``UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED)) RETURNING``; on
    SQLite ``… WHERE id IN (SELECT …)`` without the lock clause (SQLite serialises
    writers).
    """
    limit = conf.BATCH_SIZE if limit is None else limit
    if limit < 1:
        return []
    connection = connections[_db()]
    stamp = _prep("started_at", timezone.now(), connection)
    jobs = _update_returning(
        connection,
        _cached_sql(connection, ("claim",), lambda: _claim_sql(connection)),
        # SET claim_token, worker_id, started_at, heartbeat_at; WHERE run_after <= now, LIMIT
        [
            _prep("claim_token", uuid.uuid4(), connection),
            worker_id[:200],
            stamp,
            stamp,
            stamp,
            limit,
        ],
        hot=True,
    )
    for job in jobs:
        _log("claimed", job, worker=worker_id)
    return jobs


def heartbeat(job: Job) -> bool:
    """Refresh a claimed job's liveness; False if the claim is no longer ours."""
    now = timezone.now()
    applied = _fenced_update(connections[_db()], job, {"heartbeat_at": now})
    if applied:
        job.heartbeat_at = now
    else:
        _log("heartbeat_refused", job, level=logging.WARNING)
    return applied


def _finish(job: Job, event: str, values: dict[str, Any], level: int = logging.INFO) -> bool:
    connection = connections[_db()]
    applied = _fenced_update(connection, job, values)
    if not applied:
        _log(f"{event}_refused", job, level=logging.WARNING, reason="claim_lost")
        return False

    def committed() -> None:
        # Only once the write is durable: inside a transaction that later rolls back
        # (the connection dies before COMMIT) the job keeps its claim token, so that
        # this worker can still record what happened, and no false line is logged.
        for name, value in values.items():
            setattr(job, name, value)
        _log(event, job, level=level)

    connection.on_commit(committed)
    return True


def complete(
    job: Job,
    *,
    llm_model: str = "",
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    llm_ms: int | None = None,
) -> bool:
    """Mark a claimed job completed with its LLM metrics; False if the claim was lost."""
    values = {
        "status": JobStatus.COMPLETED,
        "completed_at": timezone.now(),
        "error_code": "",
        "error_message": "",
        "claim_token": None,
        "llm_model": llm_model[:200],
        "llm_prompt_tokens": prompt_tokens,
        "llm_completion_tokens": completion_tokens,
        "llm_ms": llm_ms,
    }
    return _finish(job, "completed", values)


def fail(
    job: Job, code: str, message: str = "", *, retry_after: float | None = None
) -> JobStatus | None:
    """Record a failed attempt; the job's new status, or None if the claim was lost.

    Transient codes go back to ``pending`` after a backoff (or ``retry_after``
    seconds, e.g. from a Retry-After header) while attempts remain; permanent codes,
    and transient ones on the last attempt, end ``failed``.
    """
    code = ErrorCode(code)
    now = timezone.now()
    values: dict[str, Any] = {
        "error_code": code,
        "error_message": _clip(message),
        "claim_token": None,
    }
    if code in TRANSIENT_ERRORS and job.attempts < job.max_attempts:
        delay = backoff_seconds(job.attempts) if retry_after is None else max(0.0, retry_after)
        values.update(status=JobStatus.PENDING, run_after=now + timedelta(seconds=delay))
        event = "retry_scheduled"
    else:
        values.update(status=JobStatus.FAILED, completed_at=now)
        event = "failed"
    if not _finish(job, event, values, level=logging.WARNING):
        return None
    return JobStatus(values["status"])


def release(job: Job, *, delay: float = 0.0, code: str = "", message: str = "") -> bool:
    """Put a claimed job back to pending without counting the attempt.

    For failures that are not the job's fault (the LLM server is down or
    overloaded): the job waits ``delay`` seconds and keeps all its attempts.
    """
    values: dict[str, Any] = {
        "status": JobStatus.PENDING,
        # Under the fence nobody else can change attempts: undo the claim's count.
        "attempts": job.attempts - 1,
        "run_after": timezone.now() + timedelta(seconds=max(0.0, delay)),
        "claim_token": None,
        "error_code": ErrorCode(code) if code else "",
        "error_message": _clip(message),
    }
    return _finish(job, "released", values)


def skip_claimed(job: Job, code: str, message: str = "") -> bool:
    """Mark a claimed job skipped (e.g. a reserved or unknown kind); fenced."""
    values = {
        "status": JobStatus.SKIPPED,
        "error_code": ErrorCode(code),
        "error_message": _clip(message),
        "completed_at": timezone.now(),
        "claim_token": None,
    }
    return _finish(job, "skipped", values)


# --------------------------------------------------------------------------- operator side


@dataclass
class RetryResult:
    """Outcome of an operator retry, by job id."""

    retried: list[int] = field(default_factory=list)
    wrong_state: list[int] = field(default_factory=list)  # pending, processing or completed
    conflicts: list[int] = field(default_factory=list)  # another active job has the pair
    missing: list[int] = field(default_factory=list)


def retry(job_ids: Iterable[int]) -> RetryResult:
    """Operator retry: failed or skipped jobs back to pending with attempts reset.

    Refused for pending, processing and completed jobs, and for a job whose
    (question, kind) already has an active job: retry never makes a second one.
    """
    db = _db()
    result = RetryResult()
    ids = sorted({int(i) for i in job_ids})
    known = set(Job.objects.using(db).filter(pk__in=ids).values_list("pk", flat=True))
    retryable = (JobStatus.FAILED, JobStatus.SKIPPED)
    for job_id in ids:
        if job_id not in known:
            result.missing.append(job_id)
            continue
        now = timezone.now()
        try:
            # One savepoint per job: a unique-constraint conflict refuses this job only.
            with transaction.atomic(using=db):
                changed = (
                    Job.objects.using(db)
                    .filter(pk=job_id, status__in=retryable)
                    .update(
                        status=JobStatus.PENDING,
                        attempts=0,
                        run_after=now,
                        error_code="",
                        error_message="",
                        started_at=None,
                        heartbeat_at=None,
                        completed_at=None,
                        claim_token=None,
                        worker_id="",
                    )
                )
        except IntegrityError:
            result.conflicts.append(job_id)
            logger.warning("study_job_retry_refused id=%s reason=active_job_exists", job_id)
            continue
        if changed:
            result.retried.append(job_id)
            _log("retried", Job.objects.using(db).get(pk=job_id))
        else:
            result.wrong_state.append(job_id)
            logger.warning("study_job_retry_refused id=%s reason=wrong_state", job_id)
    if result.retried:
        _notify(db)
    return result


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
    longer processing and change nothing.
    """
    connection = connections[_db()]
    qn = connection.ops.quote_name
    ids = sorted({int(i) for i in job_ids})
    if not ids:
        return SkipResult()
    active = ", ".join(f"'{s.value}'" for s in ACTIVE_STATUSES)
    sql = _returning_sql(
        connection,
        f"{qn('status')} = '{JobStatus.SKIPPED.value}', {qn('error_code')} = %s,"
        f" {qn('error_message')} = %s, {qn('completed_at')} = %s, {qn('claim_token')} = NULL",
        f"{qn('id')} IN ({', '.join(['%s'] * len(ids))}) AND {qn('status')} IN ({active})",
    )
    stamp = _prep("completed_at", timezone.now(), connection)
    jobs = _update_returning(connection, sql, [ErrorCode(code).value, _clip(message), stamp, *ids])
    for job in jobs:
        _log("skipped", job)
    done = {job.pk for job in jobs}
    return SkipResult(skipped=sorted(done), wrong_state=[i for i in ids if i not in done])


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
    """Processing jobs with no heartbeat for ``older_than`` go back to pending.

    A job that has used all its attempts ends ``failed`` with ``stale`` instead, so
    a job that keeps killing its worker cannot loop forever. Clearing the claim
    token fences out the old worker should it wake up. ``job_ids`` limits the scan
    to those jobs (the admin's action on a selection).
    """
    if older_than is None:
        older_than = timedelta(minutes=conf.STALE_MINUTES)
    connection = connections[_db()]
    qn = connection.ops.quote_name
    now = timezone.now()
    cutoff = now - older_than
    ids = None if job_ids is None else sorted({int(i) for i in job_ids})
    if ids == []:
        return StaleResult(reset=0, failed=0)
    if dry_run:
        stale = Job.objects.using(connection.alias).stale(cutoff)
        if ids is not None:
            stale = stale.filter(pk__in=ids)
        exhausted = stale.filter(attempts__gte=F("max_attempts")).count()
        return StaleResult(reset=stale.count() - exhausted, failed=exhausted)
    message = f"no heartbeat for {older_than.total_seconds():.0f}s; worker presumed dead"
    stale_where = f"{qn('status')} = '{JobStatus.PROCESSING.value}' AND {qn('heartbeat_at')} < %s"
    stale_params: list[Any] = [_prep("heartbeat_at", cutoff, connection)]
    if ids is not None:
        stale_where += f" AND {qn('id')} IN ({', '.join(['%s'] * len(ids))})"
        stale_params += ids
    stamp = _prep("completed_at", now, connection)
    common = (
        f"{qn('claim_token')} = NULL, {qn('error_code')} = '{ErrorCode.STALE.value}',"
        f" {qn('error_message')} = %s"
    )
    failed = _update_returning(
        connection,
        _returning_sql(
            connection,
            f"{qn('status')} = '{JobStatus.FAILED.value}', {qn('completed_at')} = %s, {common}",
            f"{stale_where} AND {qn('attempts')} >= {qn('max_attempts')}",
        ),
        [stamp, message, *stale_params],
    )
    reset = _update_returning(
        connection,
        _returning_sql(
            connection,
            f"{qn('status')} = '{JobStatus.PENDING.value}', {qn('run_after')} = %s,"
            f" {qn('started_at')} = NULL, {qn('heartbeat_at')} = NULL, {common}",
            stale_where,
        ),
        [stamp, message, *stale_params],
    )
    for job in failed:
        _log("stale_failed", job, level=logging.WARNING)
    for job in reset:
        _log("stale_reset", job, level=logging.WARNING)
    return StaleResult(
        reset=len(reset),
        failed=len(failed),
        reset_ids=[job.pk for job in reset],
        failed_ids=[job.pk for job in failed],
    )


def prune_finished(*, older_than: timedelta) -> int:
    """Delete finished (completed, failed, skipped) jobs that ended before ``older_than`` ago."""
    cutoff = timezone.now() - older_than
    deleted, _ = Job.objects.using(_db()).finished().filter(completed_at__lt=cutoff).delete()
    logger.info("study_jobs_pruned count=%s older_than_days=%s", deleted, older_than.days)
    return deleted


# --------------------------------------------------------------------------- async twins

aenqueue = _async(enqueue)
aenqueue_many = _async(enqueue_many)
aclaim = _async(claim)
aheartbeat = _async(heartbeat)
acomplete = _async(complete)
afail = _async(fail)
arelease = _async(release)
askip_claimed = _async(skip_claimed)
aretry = _async(retry)
askip = _async(skip)
areset_stale = _async(reset_stale)
