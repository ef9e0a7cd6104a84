"""The attempt log: one row per time a job was run, opened with its claim and ended with
what became of it, in the same statement or transaction as the job's own write."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import connections, models
from django.db.models import QuerySet

from studyqueue.models import JobAttempt, Outcome
from studyqueue.queue import sql


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


def open_claimed_attempts(db: str, job_ids: list[int]) -> None:
    """SQLite (no data-modifying WITH): open the just claimed jobs' attempts, in the claim's."""
    if not job_ids:
        return
    with connections[db].cursor() as cursor:
        cursor.execute(
            sql.open_attempts(len(job_ids)), {f"id{i}": pk for i, pk in enumerate(job_ids)}
        )


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


def finish_with_attempt(
    db: str, job_update: tuple[str, dict[str, Any]], ending: AttemptEnding
) -> bool:
    """PostgreSQL: a job's fenced ``UPDATE … RETURNING id`` and, if it applied, its open
    attempt's close, in one statement; whether the job's update applied."""
    closing, params = assignments(JobAttempt, ending.values(), db, prefix="attempt_")
    update, job_params = job_update
    with connections[db].cursor() as cursor:
        cursor.execute(sql.finish_with_attempt(update, closing), {**job_params, **params})
        row = cursor.fetchone()
    return bool(row and row[0] == 1)


def end_attempts(db: str, jobs: list[int] | QuerySet[Any, Any], ending: AttemptEnding) -> int:
    """End the open attempts of many jobs (ids, or a QuerySet of ids) in one statement."""
    return open_attempts(db).filter(job_id__in=jobs).update(**ending.values())


def attempts_of(job_id: int, *, last: int) -> list[JobAttempt]:
    """A job's last ``last`` attempts, first to last."""
    return list(reversed(JobAttempt.objects.filter(job_id=job_id).order_by("-number")[:last]))
