"""The queue's raw SQL in one place, by database: the claim, the fenced write of a job and
the attempt log's statements (and the two that run them: ``open_claimed_attempts``,
``finish_with_attempt``), how values are bound, and how the claim is sent prepared
(``run_prepared``). Which pending job may run is written once here (``claimable``),
assembled from the waits the job kinds register (``models.KindSpec``); the claim, "when is
the next job due" and "is a job ready" all read it."""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from django.db import DatabaseError, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from studyqueue.models import JobAttempt, delivery_kinds, kind_waits


def vendor(alias: str) -> str:
    """The database of ``alias`` (``"postgresql"``, ``"sqlite"``): what the queue's statements
    differ by. The rest of the queue asks here, or ``postgres``."""
    return connections[alias].vendor


def postgres(alias: str) -> bool:
    """Whether database ``alias`` is PostgreSQL."""
    return vendor(alias) == "postgresql"


def db_value(model: type[models.Model], field_name: str, value: Any, db: str) -> Any:
    """A Python value as database ``db`` wants it for ``model.field_name`` (raw SQL)."""
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.Field)  # a concrete column, not a reverse relation
    return field.get_db_prep_save(value, connections[db])


def assignments(
    model: type[models.Model], values: dict[str, Any], db: str, *, prefix: str
) -> tuple[str, dict[str, Any]]:
    """``"column" = %(<prefix><name>)s, …`` for ``values`` (by field name), and its parameters."""
    quote = connections[db].ops.quote_name
    parts, params = [], {}
    for name, value in values.items():
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field) and field.column is not None  # a column
        key = f"{prefix}{name}"
        parts.append(f"{quote(field.column)} = %({key})s")
        params[key] = db_value(model, name, value, db)
    return ", ".join(parts), params


# A pending job may run while it has attempts left, its kind (or every kind) is not paused and
# its kind's wait does not hold. Status literals are inlined so that the planner matches the
# partial index ``studyqueue_job_claim``.
_CLAIMABLE = """job.status = 'pending' AND job.attempts < job.max_attempts
      AND NOT EXISTS (
        SELECT 1 FROM studyqueue_queuepause AS pause WHERE pause.kind IN ('', job.kind)
      ){waits}"""


def awaiting_key_check(question: str) -> str:
    """SQL: the question aliased ``question`` has a disputed key no reviewer checked yet
    (``models.awaiting_key_check`` in the ORM)."""
    return f"{question}.key_audit = 'disputed' AND {question}.key_check = ''"


def active(job: str) -> str:
    """SQL: the job aliased ``job`` will still run (it runs, or waits with attempts left)."""
    return (
        f"({job}.status = 'processing'"
        f" OR ({job}.status = 'pending' AND {job}.attempts < {job}.max_attempts))"
    )


@functools.cache
def _claimable(waits: tuple[tuple[str, str], ...]) -> str:
    return _CLAIMABLE.format(
        waits="".join(f"\n      AND NOT (job.kind = '{kind}' AND ({wait}))" for kind, wait in waits)
    )


def claimable() -> str:
    """SQL: the job aliased ``job`` may be claimed once due (parameter ``holds``)."""
    return _claimable(kind_waits())


# The claim: the ready jobs, taken and marked in one statement: atomic on both databases
# without a transaction (there is no async ``atomic()``). On PostgreSQL, SKIP LOCKED lets
# consumers pass each other's rows, and ``= ANY(ARRAY(…))`` runs the SELECT once as an init
# plan (``IN (…)`` plans a slower semi-join); SQLite serialises writers and has neither. By
# priority (``KindSpec.priority``), then the earliest deadline of the question's sets, then
# turn (a batch queued later takes turns with earlier ones), then age; deliveries
# (``KindSpec.delivery``) only when the caller has room for them.
_READY_IDS = """
    SELECT id FROM studyqueue_studyquestionjob AS job
    WHERE {claimable} AND job.run_after <= %(now)s
      AND (%(deliveries)s OR job.kind NOT IN ({deliveries}))
    ORDER BY {order}
    LIMIT {limit}"""


# Jobs with a deadline first, the earliest first: PostgreSQL sorts NULLs last in ascending
# order, as the index holds them; SQLite sorts them first, and has no index order to match.
_ORDER = {
    "postgresql": "priority, deadline, turn, id",
    "sqlite": "priority, deadline IS NULL, deadline, turn, id",
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


@functools.cache
def _claim(vendor: str, limit: int, claimable: str, deliveries: frozenset[str]) -> str:
    ready = _READY_IDS.format(
        claimable=claimable,
        deliveries=", ".join(f"'{kind}'" for kind in sorted(deliveries)) or "''",
        order=_ORDER[vendor],
        limit=int(limit),
    )
    if vendor == "postgresql":
        # Each claim opens its jobs' attempts in the same statement.
        return opening_attempts(
            _CLAIM.format(ids=f"id = ANY(ARRAY({ready}\n    FOR UPDATE SKIP LOCKED))")
        )
    return _CLAIM.format(ids=f"id IN ({ready})")  # then ``open_attempts`` in its transaction


def claim(vendor: str, limit: int) -> str:
    """The claim of up to ``limit`` jobs (parameters ``now``, ``deliveries``, ``holds``,
    ``token``, ``worker_id``): ``RETURNING *`` of the claimed jobs. The limit is written in:
    planned once for every value, a ``LIMIT`` parameter would be planned as a tenth of the
    queue, sorting every pending job (35 ms a claim at a million questions, 2.1 ms with it)."""
    return _claim(vendor, limit, claimable(), delivery_kinds())


# One given job, for an operator who runs it now (``manage.py explain``): not before its
# turn in the queue matters, nor a pause; attempts and the fence are as for any claim.
_CLAIM_ONE = _CLAIM.format(ids="id = %(job_id)s AND status = 'pending' AND attempts < max_attempts")


def claim_one(vendor: str) -> str:
    """The claim of one given job (parameters ``job_id``, ``token``, ``worker_id``, ``now``)."""
    return opening_attempts(_CLAIM_ONE) if vendor == "postgresql" else _CLAIM_ONE


def claimable_jobs(*, due: bool, order: str = "", limit: int | None = None) -> str:
    """The claimable jobs (parameter ``holds``); ``due``: only those due (parameter ``now``):
    what a claim would take now, in ``order`` (none: any one will do)."""
    return (
        f"SELECT * FROM studyqueue_studyquestionjob AS job WHERE {claimable()}"
        + (" AND job.run_after <= %(now)s" if due else "")
        + (f" ORDER BY {order}" if order else "")
        + (f" LIMIT {int(limit)}" if limit is not None else "")
    )


def fenced_update(sets: str) -> str:
    """A job's ``UPDATE`` that applies only while it is processing under the caller's claim
    (parameters ``fence_id``, ``fence_token``), ``RETURNING id``."""
    return (
        f"UPDATE studyqueue_studyquestionjob SET {sets} WHERE id = %(fence_id)s"
        " AND status = 'processing' AND claim_token = %(fence_token)s RETURNING id"
    )


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


def opening_attempts(claim_sql: str) -> str:
    """PostgreSQL: a claim (``UPDATE … RETURNING *``) that opens its jobs' attempts in the
    same statement; it returns the claimed jobs as the claim alone does."""
    opened = _OPEN_ATTEMPT.format(source="claimed", where="true")
    return f"WITH claimed AS ({claim_sql}), opened AS ({opened})\nSELECT * FROM claimed"


def open_claimed_attempts(db: str, job_ids: list[int]) -> None:
    """SQLite (no data-modifying WITH): open the just claimed jobs' attempts, in the claim's
    transaction."""
    if not job_ids:
        return
    where = f"job.id IN ({', '.join(f'%(id{i})s' for i in range(len(job_ids)))})"
    with connections[db].cursor() as cursor:
        cursor.execute(
            _OPEN_ATTEMPT.format(source="studyqueue_studyquestionjob", where=where),
            {f"id{i}": pk for i, pk in enumerate(job_ids)},
        )


# A job's fenced UPDATE (``{job}``, RETURNING its id) and its open attempt's close, in one
# statement: both apply or neither, in one round trip (and one commit, outside a transaction).
_FINISH_WITH_ATTEMPT = """
WITH job AS ({job}),
closed AS (
    UPDATE studyqueue_jobattempt SET {closing}
    WHERE job_id IN (SELECT id FROM job) AND ended_at IS NULL
)
SELECT count(*) FROM job"""


def finish_with_attempt(
    db: str, job_update: tuple[str, dict[str, Any]], closing: dict[str, Any]
) -> bool:
    """PostgreSQL: a job's fenced ``UPDATE … RETURNING id`` (``fenced_update`` and its
    parameters) and, if it applied, its open attempt's close (``closing``: the attempt's
    fields and values), in one statement; whether the job's update applied."""
    sets, params = assignments(JobAttempt, closing, db, prefix="attempt_")
    update, job_params = job_update
    with connections[db].cursor() as cursor:
        statement = _FINISH_WITH_ATTEMPT.format(job=update, closing=sets)
        cursor.execute(statement, {**job_params, **params})
        row = cursor.fetchone()
    return bool(row and row[0] == 1)


T = TypeVar("T")

# The statements prepared on each connection (``_prepared``): a new connection has none.
_PREPARED: weakref.WeakKeyDictionary[BaseDatabaseWrapper, set[str]] = weakref.WeakKeyDictionary()
_PARAMETER = re.compile(r"%\((\w+)\)s")


def _new_session(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    _PREPARED.pop(connection, None)


def _prepared(alias: str, statement: str) -> str:
    # Connected on first use: only a PostgreSQL session prepares.
    connection_created.connect(_new_session, dispatch_uid="studyqueue.queue.sql")
    names = list(dict.fromkeys(_PARAMETER.findall(statement)))
    name = "studyqueue_" + hashlib.sha256(statement.encode()).hexdigest()[:16]
    connection = connections[alias]
    with connection.cursor() as cursor:  # connects first if need be: a new session has none
        done = _PREPARED.setdefault(connection, set())
        if not done:
            # Planned once, for every value: PostgreSQL's default would plan the claim anew
            # on each run, its parameters' costs never convincing it otherwise (4.0 ms a
            # claim against 2.1 at a million questions). Only prepared statements read this.
            cursor.execute("SET plan_cache_mode = force_generic_plan")
        if name not in done:
            body = _PARAMETER.sub(lambda found: f"${names.index(found[1]) + 1}", statement)
            cursor.execute(f"PREPARE {name} AS {body}")
            done.add(name)
    return f"EXECUTE {name}({', '.join(f'%({n})s' for n in names)})"


def run_prepared(alias: str, statement: str, run: Callable[[str], T]) -> T:
    """``run(sql)`` with ``statement`` (``%(name)s`` parameters) prepared once per session of
    PostgreSQL database ``alias``, which then parses and plans it once, not on every call
    (a claim at a million questions: 2.1 ms, against 4.0 planned each time). Only where a
    session is one connection (``pg.mode``: through a transaction pooler, the ``EXECUTE``
    could reach another session)."""
    try:
        return run(_prepared(alias, statement))
    except DatabaseError as exc:
        # A migration changed a column the statement returns: PostgreSQL refuses the old
        # plan ("cached plan must not change result type"). Prepared again, it runs.
        changed = isinstance(exc.__cause__, psycopg.errors.FeatureNotSupported)
        if not changed or connections[alias].in_atomic_block:
            raise
    with connections[alias].cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    _PREPARED.pop(connections[alias], None)
    return run(_prepared(alias, statement))
