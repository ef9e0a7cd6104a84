"""Questions in (JSON Lines or CSV), for ``importquestions``: every row cleaned, then
validated, before anything is written (explanations out: ``explanations.export``)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import normalize_newlines
from django.utils.translation import gettext as _

from studyqueue.explanations import answers, banks, edits, next_step
from studyqueue.explanations.banks import FileError
from studyqueue.models import (
    JobKind,
    QuestionQuerySet,
    StudyQuestion,
    StudyQuestionJob,
    Tag,
    tag_names,
    validate_choices,
    width,
)
from studyqueue.queue.operations import batches

FORMATS = ("jsonl", "csv", *banks.READERS)
EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".xml": "moodle",
    ".gift": "gift",
}
BOM = "\ufeff"  # UTF-8's byte-order mark, EF BB BF once encoded: CSV exports start with it
FIELDS = ("text", "choices", "answer", "external_id", "tags")
EXTERNAL_ID_MAX = width(StudyQuestion, "external_id")
TAG_MAX = width(Tag, "name")
FIELD_MAX = 128 * 1024  # characters in one field, both formats: the csv module's own limit
LINE_MAX = 4 * 1024 * 1024  # characters in one line read: memory stays bounded
BATCH = 1000
# C0 and C1 control characters (tab and line ends kept in text), lone surrogates (from a
# JSON "\ud800" escape or, as U+DC80-U+DCFF, from bytes that are not UTF-8).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Row:
    """One valid question to import; ``line`` is where it starts in the file."""

    line: int | str  # Moodle XML: the question's position and name
    text: str
    choices: list[str]
    answer: str
    external_id: str | None
    tags: tuple[str, ...] | None = None  # None: the file says nothing of them


@dataclass
class Parsed:
    rows: list[Row] = field(default_factory=list)
    errors: list[tuple[int | str, str]] = field(default_factory=list)  # (where, reason)
    warnings: list[tuple[int | str, str]] = field(default_factory=list)  # (where, note)
    skipped: Counter[str] = field(default_factory=Counter)  # questions of a type not explained
    ignored: Counter[str] = field(default_factory=Counter)  # what was read but is not kept


def at(where: int | str) -> str:
    """Where a row is: its line, or (Moodle XML) its question's position and name."""
    return _("line %(line)s") % {"line": where} if isinstance(where, int) else where


def format_of(name: str, given: str | None) -> str:
    """The file's format: ``given``, else its extension."""
    if given:
        return given
    for extension, fmt in EXTENSIONS.items():
        if name.lower().endswith(extension):
            return fmt
    shown = {"name": name, "formats": ", ".join(FORMATS)}
    raise ValueError(_("cannot tell the format of %(name)r: give --format (%(formats)s)") % shown)


class _LineTooLong(Exception):
    """A line over LINE_MAX characters; the rest of it has been read past."""


_QUOTE = re.compile('"')


def _still_quoted(text: str, quoted: bool, before: str) -> bool:
    """Whether a quoted CSV field is open after ``text`` (``before``: the character in front
    of it), by csv's rules: a quote opens a field only at its start, ``""`` inside is a quote."""
    escaped = -1
    for match in _QUOTE.finditer(text):
        at = match.start()
        if at == escaped:
            continue
        if quoted:
            if text.startswith('"', at + 1):
                escaped = at + 1
            else:
                quoted = False
        elif (text[at - 1] if at else before) in ",\r\n":
            quoted = True
    return quoted


class _Lines:
    """The stream's lines, numbered from 1 (one over LINE_MAX raises ``_LineTooLong``); for
    CSV, the current record's, to tell where a broken record ends and whether it merged rows."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.number = 0
        self.columns = 0  # the CSV header's, once read
        self.record: list[str] = []
        self.quoted = False  # a quoted field open before ``record``
        self.whole = True  # no line of the record was too long to keep

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.stream.readline(LINE_MAX)
        if not line:
            raise StopIteration
        self.number += 1
        if len(line) == LINE_MAX and not line.endswith(("\n", "\r")):
            self.whole = False
            self._read_past(line)
            raise _LineTooLong
        if self.number == 1:
            line = line.removeprefix("\ufeff")  # standard input keeps its byte order mark
            if line.startswith(("\udcff\udcfe", "\udcfe\udcff")):  # read as UTF-8
                raise FileError(1, _("the file is UTF-16: save it as UTF-8"))
        if self.columns:
            self.record.append(line)
        return line

    def _read_past(self, start: str) -> None:
        quoted, before = self.ends_quoted(), "\n"
        chunk = start
        while chunk:
            quoted, before = _still_quoted(chunk, quoted, before), chunk[-1]
            if chunk.endswith(("\n", "\r")):
                break
            chunk = self.stream.readline(LINE_MAX)
        self.quoted = quoted

    def looks_like_rows(self) -> bool:
        """Whether each line of the record so far looks like a row of its own."""
        return self.whole and self.columns > 1 and all(map(self._looks_like_row, self.record))

    def _looks_like_row(self, line: str) -> bool:
        text = line.rstrip("\r\n")
        if text.count(",") == self.columns - 1:
            return True
        if '"' not in text or text.count('"') % 2:
            return False
        try:
            return len(next(csv.reader([text]))) == self.columns
        except csv.Error:
            return False

    def mark(self) -> int:
        """A record starts: the number of its first line."""
        self.record.clear()
        self.quoted, self.whole = False, True
        return self.number + 1

    def ends_quoted(self) -> bool:
        """Whether the record read so far ends inside a quoted field."""
        for line in self.record:
            self.quoted = _still_quoted(line, self.quoted, "\n")
        self.record.clear()
        return self.quoted

    def resync(self) -> None:
        """After a broken record, read past the rest of the quoted field it left open."""
        while self.ends_quoted():
            try:
                next(self)
            except StopIteration:
                return
            except _LineTooLong:
                pass


class _FieldTwice(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:  # json keeps the last silently: which one did the author mean?
            raise _FieldTwice(_("field %(name)s given twice") % {"name": _shown(key)})
        result[key] = value
    return result


_JSON = json.JSONDecoder(object_pairs_hook=_object)


# Each reader yields (first line, raw record); a record's error comes back as the record.
def _jsonl_records(lines: _Lines) -> Iterator[tuple[int, Any]]:
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except _LineTooLong:
            yield lines.number, _too_long_line()
            continue
        if not line.strip():
            continue
        try:
            yield lines.number, _JSON.decode(line)
        except _FieldTwice as exc:
            yield lines.number, exc
        except RecursionError:
            yield lines.number, ValueError(_("not JSON: nested too deeply"))
        except ValueError as exc:  # JSONDecodeError, or an integer of too many digits
            yield lines.number, ValueError(_("not JSON: %(error)s") % {"error": exc})


def json_lines(stream: IO[str]) -> Iterator[tuple[int, Any]]:
    """(line number, the line's JSON value) for each line that is not blank; a line that
    cannot be read comes back as a ``ValueError`` saying why, in place of its value."""
    return _jsonl_records(_Lines(stream))


def _csv_records(lines: _Lines) -> Iterator[tuple[int, Any]]:
    # strict: a quoted field followed by more text, or never closed, is an error, not a guess
    reader = csv.reader(lines, strict=True)
    header = _csv_header(reader, lines)
    lines.columns = len(header)  # from here on, _Lines keeps each record's lines
    unknown = [name for name in header if name and name not in FIELDS]
    if unknown:  # said once, for the header; the rows are read without them
        names = {"names": ", ".join(map(_shown, unknown)), "known": ", ".join(FIELDS)}
        unread = _("unknown column(s) %(names)s in the CSV header, not read (known: %(known)s)")
        yield lines.number, UserWarning(unread % names)
    while True:
        start = lines.mark()
        try:
            fields = next(reader)
        except StopIteration:
            return
        except (csv.Error, _LineTooLong) as exc:
            end = lines.number
            # csv's only size error; the message is the one thing that tells it apart
            oversize = isinstance(exc, _LineTooLong) or "field limit" in str(exc)
            if end > start and (not oversize or lines.looks_like_rows()):
                raise FileError(start, _stray_quote(end, exc)) from None
            lines.resync()
            yield start, _csv_error(exc, start, lines.number)
            continue
        if lines.number > start and lines.looks_like_rows():
            raise FileError(start, _stray_quote(lines.number, None))
        if not any(value.strip() for value in fields):
            continue  # a blank line, or a spreadsheet's empty row (",,,")
        if len(fields) > len(header) and any(value.strip() for value in fields[len(header) :]):
            found = {"found": len(fields), "columns": len(header)}
            yield start, ValueError(_("%(found)s fields where the header has %(columns)s") % found)
            continue
        record = {
            name: value
            for name, value in zip(header, fields, strict=False)
            if (name or value.strip()) and name not in unknown
        }
        yield start, record


def _csv_header(reader: Iterator[list[str]], lines: _Lines) -> list[str]:
    try:
        fields: list[str] | None = []
        while fields == []:
            fields = next(reader, None)
    except (csv.Error, _LineTooLong) as exc:
        reason = _too_long_line() if isinstance(exc, _LineTooLong) else exc
        raise FileError(
            lines.number, _("the CSV header cannot be read: %(error)s") % {"error": reason}
        ) from None
    names = [name.strip() for name in fields or []]
    if "text" not in names:
        raise FileError(max(lines.number, 1), _("the CSV header has no 'text' column"))
    for name in names:
        if name and names.count(name) > 1:
            raise FileError(
                lines.number,
                _("the CSV header names the column %(name)s twice") % {"name": _shown(name)},
            )
    return names


def _too_long_line() -> ValueError:
    return ValueError(_("the line is longer than %(max)s characters") % {"max": LINE_MAX})


def _csv_error(exc: Exception, start: int, end: int) -> ValueError:
    if isinstance(exc, _LineTooLong):
        reason = str(_too_long_line())
    elif "field limit" in str(exc):
        reason = _("a field is longer than %(max)s characters") % {"max": FIELD_MAX}
    elif "expected after" in str(exc):
        reason = _(
            "text after the closing quote of a field: write a quote inside a quoted field "
            'as "" (%(error)s)'
        ) % {"error": exc}
    elif "unexpected end of data" in str(exc):
        reason = _("a quoted field is never closed")
    else:
        reason = _("not valid CSV: %(error)s") % {"error": exc}
    if end > start:
        skipped = {"reason": reason, "start": start, "end": end}
        reason = _("%(reason)s (lines %(start)s-%(end)s skipped)") % skipped
    return ValueError(reason)


def _stray_quote(end: int, exc: Exception | None) -> str:
    if exc is None or isinstance(exc, _LineTooLong) or "field limit" in str(exc):
        what = _(
            "a quoted field opened on this line runs on to line %(end)s over lines that "
            "look like rows of their own"
        ) % {"end": end}
    elif "unexpected end of data" in str(exc):
        what = _(
            "a quoted field opened on this line is never closed (the file ends on line %(end)s)"
        ) % {"end": end}
    else:
        breaks = _("a quoted field opened on this line breaks on line %(end)s (%(error)s)")
        what = breaks % {"end": end, "error": exc}
    advice = _('%(what)s: a stray quote? Quote whole fields, and write a quote inside one as ""')
    return advice % {"what": what}


def _shown(name: object) -> str:
    """A field name as it may be printed: short, and escaped unless plain."""
    text = str(name)
    if text.isprintable() and 0 < len(text) <= 40:
        return text
    shown = repr(text[:40])
    return shown + "…" if len(text) > 40 else shown


def _string(value: Any, name: str | None, *, one_line: bool = False) -> str:
    """A text field cleaned, absent as empty; ``ValueError`` (about ``name``) if invalid."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(_("%(name)s must be text") % {"name": name})
    if _SURROGATE.search(value):
        raise _not_unicode(name)
    return clean(value, one_line=one_line)


def _not_unicode(name: str | None) -> ValueError:
    invalid = _("not valid Unicode (a lone surrogate, or bytes that are not UTF-8)")
    if name is None:
        return ValueError(invalid)
    return ValueError(_("%(name)s is %(invalid)s") % {"name": name, "invalid": invalid})


def clean(text: str, *, one_line: bool = False) -> str:
    """``text`` without control characters, line ends as ``\\n`` (``one_line``: none)."""
    return (_ANY_CONTROL if one_line else _CONTROL).sub("", normalize_newlines(text))


def _too_long(name: str, limit: int) -> ValueError:
    return ValueError(
        _("'%(name)s' is longer than %(max)s characters") % {"name": name, "max": limit}
    )


def _choices(value: Any, fmt: str) -> list[str]:
    if fmt == "csv" and isinstance(value, str):
        value = _string(value, None).strip()
        if not value:
            return []
        if not value.startswith("["):  # "Paris | Rome | Berlin"
            return [part.strip() for part in value.split("|") if part.strip()]
        value = _json_cell(value)
    if value is None:
        return []
    if isinstance(value, list):
        for number, choice in enumerate(value, start=1):
            if isinstance(choice, str) and _SURROGATE.search(choice):
                raise _not_unicode(_("choice %(number)s") % {"number": number})
        value = [clean(choice) if isinstance(choice, str) else choice for choice in value]
    validate_choices(value)  # after cleaning: a NUL-only choice is an empty one
    if sum(len(choice) for choice in value) > FIELD_MAX:
        raise _too_long("choices", FIELD_MAX)
    return value


def _json_cell(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(_("nested too deeply")) from None


def _number_as_text(value: Any) -> Any:
    """A JSON integer as the text a CSV cell would hold (an id, a choice's number or text)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _external_id(value: Any) -> str | None:
    """The cleaned id; blank means none."""
    value = _number_as_text(value)
    if value is not None and not isinstance(value, str):
        raise ValueError(
            _("'external_id' must be text of at most %(max)s characters") % {"max": EXTERNAL_ID_MAX}
        )
    external = _string(value, "'external_id'", one_line=True).strip()
    if len(external) > EXTERNAL_ID_MAX:
        raise _too_long("external_id", EXTERNAL_ID_MAX)
    return external or None


def _tags(value: Any, fmt: str) -> tuple[str, ...] | None:
    """Distinct tags in their order: a list of texts, or in CSV ``a|b``; absent: None."""
    if fmt == "csv" and isinstance(value, str):  # "a|b", or a list as JSON (an export's)
        value = _json_cell(value) if value.startswith("[") else value.split("|")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ValueError(_("'tags' must be a list of texts"))
    tags = [_string(tag, "'tags'", one_line=True).strip() for tag in value]
    if any(len(tag) > TAG_MAX for tag in tags):
        raise _too_long("tags", TAG_MAX)
    return tuple(dict.fromkeys(tag for tag in tags if tag))


def _row(number: int | str, record: Any, fmt: str) -> Row:
    """A row cleaned then validated, or ``ValueError`` with the reason."""
    if isinstance(record, ValueError):
        raise record
    if not isinstance(record, dict):
        raise ValueError(_("a record must be an object with a 'text' field"))
    unknown = set(record) - set(FIELDS)
    if unknown:
        raise ValueError(
            _("unknown field(s): %(names)s") % {"names": ", ".join(sorted(map(_shown, unknown)))}
        )
    text = _string(record.get("text"), "'text'").strip()
    if not text:
        raise ValueError(_("'text' is missing or empty"))
    if len(text) > FIELD_MAX:
        raise _too_long("text", FIELD_MAX)
    answer = _string(_number_as_text(record.get("answer")), "'answer'")
    if len(answer) > FIELD_MAX:
        raise _too_long("answer", FIELD_MAX)
    external = _external_id(record.get("external_id"))
    try:
        choices = _choices(record.get("choices"), fmt)
    except (ValidationError, ValueError) as exc:
        reason = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        raise ValueError(_("'choices': %(reason)s") % {"reason": reason}) from None
    if choices and answer.strip() and answers.key_choice(answer, choices) is None:
        # Stored, no check of the question could agree with it.
        raise ValueError(
            _(
                "'answer' %(answer)s names none of the choices: give a choice's text, "
                "number or letter"
            )
            % {"answer": repr(answer[:40])}
        )
    return Row(number, text, choices, answer, external, _tags(record.get("tags"), fmt))


def parse(stream: IO[str], fmt: str) -> Parsed:
    """Every record cleaned, then checked (a repeated external id too): valid rows, and
    (line, reason) for the others; ``FileError`` when the whole file cannot be read."""
    parsed = Parsed()
    seen: dict[str, int | str] = {}
    if fmt in banks.READERS:
        records = banks.READERS[fmt](stream.read(), parsed.skipped, parsed.ignored)
    else:
        records = (_jsonl_records if fmt == "jsonl" else _csv_records)(_Lines(stream))
    for number, record in records:
        if isinstance(record, UserWarning):
            parsed.warnings.append((number, str(record)))
            continue
        try:
            row = _row(number, record, fmt)
        except ValueError as exc:
            parsed.errors.append((number, str(exc)))
            continue
        if row.external_id is not None:
            if row.external_id in seen:
                twice = {"id": row.external_id, "where": at(seen[row.external_id])}
                parsed.errors.append((number, _("external_id %(id)r also at %(where)s") % twice))
                continue
            seen[row.external_id] = number
        parsed.rows.append(row)
    return parsed


@dataclass
class Imported:
    created: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    unchanged: list[int] = field(default_factory=list)


def store(rows: list[Row], progress: Callable[[int], None] = lambda n: None) -> Imported:
    """Create or update the questions (matched on ``external_id``), in one transaction."""
    result = Imported()
    questions = StudyQuestion.objects.all()
    with transaction.atomic(using=questions.db):
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            _store_batch(batch, result, questions)
            progress(len(batch))
    return result


def _store_batch(batch: list[Row], result: Imported, questions: QuestionQuerySet) -> None:
    ids = [row.external_id for row in batch if row.external_id is not None]
    existing = {q.external_id: q for q in questions.filter(external_id__in=ids)}
    tagged = tag_names([question.pk for question in existing.values()], questions.db)
    new, changed, retagged = [], [], []
    now = timezone.now()
    for row in batch:
        question = existing.get(row.external_id) if row.external_id else None
        content = (row.text, row.choices, row.answer)
        if question is None:
            new.append(
                StudyQuestion(
                    text=row.text, choices=row.choices, answer=row.answer,
                    external_id=row.external_id,
                )
            )  # fmt: skip
            if row.tags:
                retagged.append((new[-1], row.tags))
            continue
        retag = row.tags is not None and set(row.tags) != set(tagged.get(question.pk, ()))
        if retag:
            retagged.append((question, row.tags or ()))
        if (question.text, question.choices, question.answer) != content:
            question.text, question.choices, question.answer = content
            question.updated_at = now
            changed.append(question)
        elif retag:
            result.updated.append(question.pk)  # its tags alone: its explanation stands
        else:
            result.unchanged.append(question.pk)
    result.created += [q.pk for q in questions.bulk_create(new)]
    # What the change means for their explanations, reviews and key audits, said here.
    with edits.editing([q.pk for q in changed], using=questions.db):
        questions.bulk_update(changed, ["text", "choices", "answer", "updated_at"])
    result.updated += [q.pk for q in changed]
    _set_tags(retagged, using=questions.db)


def _set_tags(tagged: list[tuple[StudyQuestion, tuple[str, ...]]], *, using: str) -> None:
    """Each question's tags become the names given (tags created as needed)."""
    names = {name for _question, tags in tagged for name in tags}
    Tag.objects.using(using).bulk_create([Tag(name=n) for n in names], ignore_conflicts=True)
    ids = dict(Tag.objects.using(using).filter(name__in=names).values_list("name", "pk"))
    links = StudyQuestion.tags.through.objects.using(using)
    links.filter(studyquestion__in=[question.pk for question, _tags in tagged]).delete()
    links.bulk_create(
        StudyQuestion.tags.through(studyquestion_id=question.pk, tag_id=ids[name])
        for question, tags in tagged
        for name in tags
    )


@dataclass(frozen=True)
class Enqueued:
    """Jobs for imported questions: new and already active explanation jobs, key audits."""

    created: int
    active_before: int
    audits: int = 0


def enqueue_explanations(question_ids: list[int]) -> Enqueued:
    """Queue what each imported question needs next (``next_step.queue_jobs``); an active
    job of a changed question explains its new text too (the write fences on the content)."""
    queued = next_step.queue_jobs(question_ids)
    jobs = StudyQuestionJob.objects.active()
    active = 0
    for chunk in batches(question_ids, jobs.db):
        active += jobs.filter(kind=JobKind.EXPLANATION, study_question_id__in=chunk).count()
    return Enqueued(queued.created, max(active - queued.created, 0), queued.audits)
