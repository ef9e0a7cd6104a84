"""Exporting explanations: one row per question (JSON Lines or CSV), with its current
explanation's metadata, its checks and, with ``--include-missing``, what a question without
one waits on; safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Collection, Generator, Iterable, Iterator
from datetime import datetime
from enum import StrEnum
from itertools import islice
from typing import IO, Any

from django.db.models import Case, CharField, Exists, OuterRef, Q, Value, When

from studyqueue.explanations import banks
from studyqueue.explanations.transfer import BOM
from studyqueue.models import (
    ACTIVE_STATUSES,
    CHECK_KINDS,
    JobKind,
    JobStatus,
    ReviewStatus,
    StudyQuestion,
    StudyQuestionJob,
    awaiting_key_check,
    key_audit_holds,
    tag_names,
)
from studyqueue.times import local_iso

FORMATS = ("jsonl", "csv", "moodle")
# Each column's meaning: docs/howto/import-export.md ("Export").
EXPORT_FIELDS = (
    "id", "external_id", "text", "choices", "answer", "tags", "explanation", "model",
    "endpoint", "prompt_version", "flags", "stated_answer", "review_status", "key_audit",
    "key_audit_answer", "verifier_answer", "step_check", "wrong_step", "wrong_step_text",
    "explained_at", "prompt_tokens", "cached_tokens", "completion_tokens", "tokens_counted",
    "ttft_ms", "tokens_per_second", "waiting_on",
)  # fmt: skip


class WaitingOn(StrEnum):
    """What a question without an explanation waits on (an export's ``waiting_on``)."""

    KEY_CHECK = "key_check"  # a disputed key holds it for a reviewer (KEY_AUDIT_HOLDS)
    KEY_AUDIT = "key_audit"  # its key audit is queued or running
    QUEUED = "queued"  # its explanation job is queued or running
    FAILED = "failed"  # its last explanation job failed
    NOT_QUEUED = "not_queued"  # no job: ``enqueue --missing`` queues one


# What a spreadsheet reads as the start of a formula (OWASP's list and full-width forms).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def _waiting_on() -> Case:
    """A question's ``WaitingOn`` in SQL (null when it is explained)."""
    jobs = StudyQuestionJob.objects.filter(study_question=OuterRef("pk"))
    active = jobs.filter(status__in=ACTIVE_STATUSES)
    held = awaiting_key_check() if key_audit_holds() else Q(pk__in=[])
    return Case(
        When(~Q(explanation=""), then=Value(None)),
        When(held, then=Value(WaitingOn.KEY_CHECK)),
        # Before its explanation, the only check a question can have is its key audit.
        When(Exists(active.filter(kind__in=CHECK_KINDS)), then=Value(WaitingOn.KEY_AUDIT)),
        When(Exists(active.filter(kind=JobKind.EXPLANATION)), then=Value(WaitingOn.QUEUED)),
        When(
            Exists(jobs.filter(kind=JobKind.EXPLANATION, status=JobStatus.FAILED)),
            then=Value(WaitingOn.FAILED),
        ),
        default=Value(WaitingOn.NOT_QUEUED),
        output_field=CharField(),
    )


def export_rows(
    *,
    since: datetime | None = None,
    outdated_for: str | Collection[str] | None = None,
    ids: Iterable[int] | None = None,
    approved: bool = False,
    include_missing: bool = False,
) -> Generator[dict[str, Any]]:
    """Explained questions with their current explanation, streamed; ``include_missing``:
    every question without one too (explanation null, and what it waits on)."""
    questions = StudyQuestion.objects.explained()
    if approved:
        questions = questions.approved()
    if outdated_for is not None:
        questions = questions.outdated(outdated_for)
    if since is not None:
        questions = questions.filter(current_revision__created_at__gte=since)
    if include_missing:
        questions = questions | StudyQuestion.objects.missing()
    if ids is not None:
        questions = questions.filter(pk__in=list(ids))
    # The model and the time from the current revision, the reply's metadata's one home.
    rows = questions.annotate(waiting_on=_waiting_on()).order_by("pk").values_list(
        "id", "external_id", "text", "choices", "answer", "explanation",
        "current_revision__model", "current_revision__endpoint",
        "explanation_prompt_version", "explanation_flags",
        "current_revision__stated_answer", "current_revision__review_status",
        "key_audit", "key_audit_answer", "current_revision__verifier_answer",
        "current_revision__step_check", "current_revision__wrong_step",
        "current_revision__wrong_step_text",
        "current_revision__created_at",
        "current_revision__prompt_tokens", "current_revision__cached_tokens",
        "current_revision__completion_tokens", "current_revision__tokens_counted",
        "current_revision__first_token_ms", "current_revision__tokens_per_second",
        "waiting_on",
    )  # fmt: skip
    for values in _tagged(rows.iterator(chunk_size=2000)):
        row = dict(zip(EXPORT_FIELDS, values, strict=True))
        if row["waiting_on"] is not None:  # not explained: nothing of an explanation
            row.update(explanation=None, prompt_version=None, review_status=None, endpoint=None)
            yield row
            continue
        # No revision (a row written by raw SQL): no model, no stated answer, unreviewed.
        row["model"], row["stated_answer"] = row["model"] or "", row["stated_answer"] or ""
        for name in ("endpoint", "step_check", "wrong_step_text"):
            row[name] = row[name] or ""
        row["review_status"] = row["review_status"] or ReviewStatus.UNREVIEWED
        row["explained_at"] = local_iso(row["explained_at"])
        yield row


def _tagged(rows: Iterator[tuple]) -> Iterator[tuple]:
    """Rows (the question's id first) with its tags sixth, read a chunk at a time."""
    while chunk := list(islice(rows, 2000)):
        tags = tag_names([row[0] for row in chunk])
        yield from ((*row[:5], tags.get(row[0], []), *row[5:]) for row in chunk)


class _Line:
    """A file-like that hands back what csv.writer writes (one line at a time)."""

    def write(self, text: str) -> str:
        return text


def spreadsheet_safe(value: Any) -> Any:
    """``value`` with a ``'`` in front if a spreadsheet would run it as a formula (OWASP)."""
    if isinstance(value, str) and (
        value.startswith(_FORMULA_START) or value.lstrip().startswith(_FORMULA_START)
    ):
        return "'" + value
    return value


def _cell(value: Any) -> Any:
    """A CSV cell: lists and objects as JSON, null empty, safe in a spreadsheet."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return spreadsheet_safe(value)


def lines(
    rows: Iterable[dict[str, Any]],
    fmt: str,
    *,
    bom: bool = True,
    fields: tuple[str, ...] = EXPORT_FIELDS,
    left_out: Counter[str] | None = None,
) -> Iterator[str]:
    """Rows as JSON Lines, spreadsheet-safe CSV lines of ``fields`` after a header (``bom``:
    marked), or a Moodle XML quiz (what it cannot hold counted in ``left_out``)."""
    if fmt == "moodle":
        yield from banks.moodle_quiz(rows, Counter() if left_out is None else left_out)
        return
    if fmt == "jsonl":
        for row in rows:
            yield json.dumps(row, ensure_ascii=False) + "\n"
        return
    writer = csv.writer(_Line())
    # Without the mark, Excel on Korean Windows reads the file as CP949 and garbles it.
    yield (BOM if bom else "") + writer.writerow(fields)
    for row in rows:
        yield writer.writerow([_cell(row[name]) for name in fields])


def write(
    rows: Iterable[dict[str, Any]],
    out: IO[str],
    fmt: str,
    *,
    bom: bool = True,
    fields: tuple[str, ...] = EXPORT_FIELDS,
    left_out: Counter[str] | None = None,
) -> int:
    """Write rows as ``lines``; how many rows."""
    count = {"csv": -1, "moodle": -2}.get(fmt, 0)  # a header (and the quiz's end) is no row
    for line in lines(rows, fmt, bom=bom, fields=fields, left_out=left_out):
        out.write(line)
        count += 1
    return max(count, 0)
