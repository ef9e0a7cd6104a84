"""Questions in (JSON Lines or CSV) and explanations out, for ``importquestions`` and
``exportexplanations``: every row validated before anything is written; exports streamed."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from studyqueue import queue
from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob, validate_choices

FORMATS = ("jsonl", "csv")
FIELDS = ("text", "choices", "answer", "external_id")
EXTERNAL_ID_MAX = 200
BATCH = 1000
EXPORT_FIELDS = (
    "id",
    "external_id",
    "text",
    "choices",
    "answer",
    "explanation",
    "model",
    "prompt_version",
    "flags",
    "explained_at",
)


@dataclass(frozen=True)
class Row:
    """One valid question to import; ``line`` is where it stood in the file."""

    line: int
    text: str
    choices: list[str]
    answer: str
    external_id: str | None


@dataclass
class Parsed:
    rows: list[Row] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)


def format_of(name: str, given: str | None) -> str:
    """The file's format: ``given``, else its extension."""
    if given:
        return given
    for fmt in FORMATS:
        if name.lower().endswith(f".{fmt}") or (fmt == "jsonl" and name.endswith(".ndjson")):
            return fmt
    raise ValueError(f"cannot tell the format of {name!r}: give --format jsonl or csv")


def _records(stream: IO[str], fmt: str) -> Iterator[tuple[int, Any]]:
    """(line number, raw record) for each record; JSON errors come back as the record."""
    if fmt == "jsonl":
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except (ValueError, RecursionError) as exc:
                yield number, ValueError(f"not JSON: {exc}")
        return
    reader = csv.DictReader(stream)
    missing = {"text"} - set(reader.fieldnames or [])
    if missing:
        raise ValueError("the CSV header has no 'text' column")
    for record in reader:
        yield reader.line_num, record


def _choices(value: Any, fmt: str) -> list[str]:
    if value in (None, ""):
        return []
    if fmt == "csv" and isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            value = json.loads(value)
        else:  # "Paris | Rome | Berlin"
            return [part.strip() for part in value.split("|") if part.strip()]
    validate_choices(value)
    return value


def _row(number: int, record: Any, fmt: str) -> Row:
    """A validated row, or ``ValueError`` with the reason."""
    if isinstance(record, ValueError):
        raise record
    if not isinstance(record, dict):
        raise ValueError("a record must be an object with a 'text' field")
    unknown = set(record) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    text, answer, external = (
        record.get("text"),
        record.get("answer") or "",
        record.get("external_id"),
    )
    if not isinstance(text, str) or not text.strip():
        raise ValueError("'text' is missing or empty")
    if not isinstance(answer, str):
        raise ValueError("'answer' must be text")
    if external in ("", None):
        external = None
    elif not isinstance(external, str | int) or len(str(external)) > EXTERNAL_ID_MAX:
        raise ValueError(f"'external_id' must be text of at most {EXTERNAL_ID_MAX} characters")
    try:
        choices = _choices(record.get("choices"), fmt)
    except (ValidationError, ValueError) as exc:
        reason = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        raise ValueError(f"'choices': {reason}") from None
    return Row(
        number,
        _clean(text).strip(),
        [_clean(choice) for choice in choices],
        _clean(answer),
        None if external is None else _clean(str(external)).strip(),
    )


def _clean(text: str) -> str:
    return text.replace("\x00", "")  # NUL characters fit no column


def parse(stream: IO[str], fmt: str) -> Parsed:
    """Every record checked; valid rows and (line, reason) for the others. Duplicate
    external ids in one file are errors (which one would win?)."""
    parsed = Parsed()
    seen: dict[str, int] = {}
    for number, record in _records(stream, fmt):
        try:
            row = _row(number, record, fmt)
        except ValueError as exc:
            parsed.errors.append((number, str(exc)))
            continue
        if row.external_id is not None:
            if row.external_id in seen:
                parsed.errors.append(
                    (
                        number,
                        f"external_id {row.external_id!r} also on line {seen[row.external_id]}",
                    )
                )
                continue
            seen[row.external_id] = number
        parsed.rows.append(row)
    return parsed


@dataclass
class Imported:
    created: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    unchanged: int = 0


def store(rows: list[Row], progress: Callable[[int], None] = lambda n: None) -> Imported:
    """Create or update the questions (matched on ``external_id``), in batches, all in one
    transaction: an import lands whole or not at all."""
    result = Imported()
    db = queue.database()
    with transaction.atomic(using=db):
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            _store_batch(batch, result, db)
            progress(len(batch))
    return result


def _store_batch(batch: list[Row], result: Imported, db: str) -> None:
    questions = StudyQuestion.objects.using(db)
    ids = [row.external_id for row in batch if row.external_id is not None]
    existing = {q.external_id: q for q in questions.filter(external_id__in=ids)}
    new, changed = [], []
    now = timezone.now()
    for row in batch:
        question = existing.get(row.external_id) if row.external_id else None
        if question is None:
            new.append(
                StudyQuestion(
                    text=row.text, choices=row.choices, answer=row.answer,
                    external_id=row.external_id,
                )
            )  # fmt: skip
        elif (question.text, question.choices, question.answer) != (
            row.text,
            row.choices,
            row.answer,
        ):
            question.text, question.choices, question.answer = row.text, row.choices, row.answer
            question.updated_at = now
            changed.append(question)
        else:
            result.unchanged += 1
    result.created += [q.pk for q in questions.bulk_create(new)]
    questions.bulk_update(changed, ["text", "choices", "answer", "updated_at"])
    result.updated += [q.pk for q in changed]


@dataclass(frozen=True)
class Enqueued:
    """Explanation jobs for imported questions: new ones, and active ones that were there."""

    created: int
    active_before: int


def enqueue_explanations(question_ids: list[int]) -> Enqueued:
    """Queue an explanation job for each imported question that has no active one.

    An active job of a changed question explains its new text too: a pending one reads the
    question when it runs, and a running one's reply is dropped by the worker (it fences on
    the question's content) and the job runs again."""
    created = queue.enqueue_many(question_ids, JobKind.EXPLANATION)
    jobs = StudyQuestionJob.objects.using(queue.database()).active()
    active = 0
    for start in range(0, len(question_ids), BATCH):
        chunk = question_ids[start : start + BATCH]
        active += jobs.filter(kind=JobKind.EXPLANATION, study_question_id__in=chunk).count()
    return Enqueued(created=created, active_before=max(active - created, 0))


def export_rows(
    *,
    since: datetime | None = None,
    outdated_for: str | None = None,
    ids: Iterable[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Explained questions with their current explanation, streamed from the database."""
    questions = StudyQuestion.objects.using(queue.database()).explained()
    if ids is not None:
        questions = questions.filter(pk__in=list(ids))
    if outdated_for is not None:
        questions = questions.outdated(outdated_for)
    if since is not None:
        questions = questions.filter(explained_at__gte=since)
    rows = questions.order_by("pk").values_list(
        "id", "external_id", "text", "choices", "answer", "explanation", "explanation_model",
        "explanation_prompt_version", "explanation_flags", "explained_at",
    )  # fmt: skip
    for values in rows.iterator(chunk_size=2000):
        row = dict(zip(EXPORT_FIELDS, values, strict=True))
        row["explained_at"] = row["explained_at"].isoformat() if row["explained_at"] else None
        yield row


class _Line:
    """A file-like that hands back what csv.writer writes (one line at a time)."""

    def write(self, text: str) -> str:
        return text


def lines(rows: Iterable[dict[str, Any]], fmt: str) -> Iterator[str]:
    """Rows as JSON Lines, or as CSV lines after a header (choices and flags as JSON)."""
    if fmt == "jsonl":
        for row in rows:
            yield json.dumps(row, ensure_ascii=False) + "\n"
        return
    writer = csv.writer(_Line())
    yield writer.writerow(EXPORT_FIELDS)
    for row in rows:
        for key in ("choices", "flags"):
            row[key] = json.dumps(row[key], ensure_ascii=False)
        yield writer.writerow(
            [row[name] if row[name] is not None else "" for name in EXPORT_FIELDS]
        )


def write(rows: Iterable[dict[str, Any]], out: IO[str], fmt: str) -> int:
    """Write rows as JSON Lines or CSV; how many rows."""
    count = -1 if fmt == "csv" else 0  # the CSV header is not a row
    for line in lines(rows, fmt):
        out.write(line)
        count += 1
    return max(count, 0)
