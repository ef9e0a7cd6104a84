"""Recording a study session: one JSON object (a line of ``importsessions``, the body of
``POST /studyqueue/api/sessions``) checked whole, scored against the keys, then written in one
transaction; the same session sent again is recognised by its external id. Whatever JSON value
comes in, the answer is the session or every reason it is not one."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from studyqueue.exceptions import StudyQueueError
from studyqueue.explanations import answers
from studyqueue.models import (
    SessionAnswer,
    StudyQuestion,
    StudyQuestionSet,
    StudySession,
    unstorable,
    width,
)
from studyqueue.sets import question_sets

FIELDS = {"external_id", "learner", "started_at", "ended_at", "set", "answers"}
ANSWER_FIELDS = {"question", "chosen", "seconds"}
MAX_ANSWERS = 500


class Invalid(ValueError):
    """The session cannot be recorded; ``reasons`` says every way it is wrong (a lone surrogate
    the client sent shown escaped: each reason can be sent as UTF-8)."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = [r.encode("utf-8", "backslashreplace").decode() for r in reasons]
        super().__init__("; ".join(self.reasons))


class Conflict(Exception):
    """A session with this external id was recorded with other content."""


@dataclass(frozen=True)
class Answer:
    question: StudyQuestion
    chosen: str
    correct: bool
    seconds: int | None


@dataclass(frozen=True)
class Session:
    """A checked session, ready to record."""

    external_id: str | None
    learner: str
    started_at: datetime
    ended_at: datetime
    question_set: StudyQuestionSet | None
    answers: list[Answer] = field(default_factory=list)
    recorded: StudySession | None = None  # a re-send whose questions no longer check

    @property
    def fingerprint(self) -> str:
        """A digest of what it says: the same session sent twice has the same."""
        content = [
            self.external_id,
            self.learner,
            self.started_at.timestamp(),
            self.ended_at.timestamp(),
            self.question_set.pk if self.question_set else None,
            [(a.question.pk, a.chosen, a.seconds) for a in self.answers],
        ]
        return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def _text(record: dict[str, Any], name: str, errors: list[str], *, required: bool) -> str | None:
    value = record.get(name)
    if value is None or value == "":
        if required:
            errors.append(_("%(name)s is missing") % {"name": name})
        return None
    limit = width(StudySession, name)
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        errors.append(
            _("%(name)s must be one line of text of at most %(max)s characters")
            % {"name": name, "max": limit}
        )
        return None
    return value


def _moment(record: dict[str, Any], name: str, errors: list[str]) -> datetime | None:
    value = record.get(name)
    if value is None:
        errors.append(_("%(name)s is missing") % {"name": name})
        return None
    try:
        moment = parse_datetime(value) if isinstance(value, str) else None
        if moment is not None:  # year 1 at +09:00 is before the first UTC time: OverflowError
            moment = timezone.make_aware(moment) if timezone.is_naive(moment) else moment
            moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):
        moment = None
    if moment is None:
        errors.append(
            _("%(name)s is not a date and time like 2026-12-01T09:00:00+09:00 (years 1-9999 UTC)")
            % {"name": name}
        )
    return moment


def _key(ref: Any) -> object:
    """How ``_questions`` files the question ``ref`` names: an external id, ``("id", N)``;
    None for a value that can name no question (a list, a lone surrogate, an id past 2**63)."""
    number = ref.get("id") if isinstance(ref, dict) else None
    if type(number) is int and 0 < number < 2**63:
        return ("id", number)
    return ref if isinstance(ref, str) and not unstorable(ref) else None


def _questions(keys: list[object]) -> dict[object, StudyQuestion]:
    """The questions of ``keys`` (``_key``), by external id and by id, in two reads."""
    names = [key for key in keys if isinstance(key, str)]
    ids = [key[1] for key in keys if isinstance(key, tuple)]
    named = StudyQuestion.objects.filter(external_id__in=names)
    numbered = StudyQuestion.objects.filter(pk__in=ids)
    return {**{q.external_id: q for q in named}, **{("id", q.pk): q for q in numbered}}


def _answer(raw: Any, known: dict[object, StudyQuestion]) -> Answer | str:
    """One answer scored against its question's key, or why it cannot be."""
    if not isinstance(raw, dict):
        return _("not an object")
    if unknown := sorted(set(raw) - ANSWER_FIELDS):
        return _("unknown fields: %(names)s") % {"names": ", ".join(unknown)}
    ref = raw.get("question")
    if ref is None:
        return _("%(name)s is missing") % {"name": "question"}
    question = known.get(_key(ref))
    if question is None:
        return _("unknown question %(ref)s") % {"ref": json.dumps(ref, ensure_ascii=False)[:80]}
    named = question.external_id or question.pk
    seconds, chosen = raw.get("seconds"), raw.get("chosen")
    if seconds is not None and (type(seconds) is not int or not 0 <= seconds <= 86_400):
        return _("seconds must be a whole number from 0 to 86400")
    if not question.answer.strip():
        return _("question %(ref)s has no key to score it against") % {"ref": named}
    if not question.choices:
        if not isinstance(chosen, str) or not chosen.strip() or len(chosen) > 2000:
            return _("chosen must be the answer's text (at most 2000 characters)")
        if unstorable(chosen):
            return _("not valid Unicode (a lone surrogate, or bytes that are not UTF-8)")
        return Answer(question, chosen.strip(), answers.same_text(chosen, question.answer), seconds)
    if isinstance(chosen, str):  # a choice's text names it
        chosen = next((n for n, c in enumerate(question.choices, 1) if c == chosen), chosen)
    if type(chosen) is not int or not 1 <= chosen <= len(question.choices):
        count = len(question.choices)
        return _("chosen must be a choice number from 1 to %(count)s") % {"count": count}
    key_number = answers.key_choice(question.answer, question.choices)
    if key_number is None:
        return _("the key of question %(ref)s names none of its choices") % {"ref": named}
    return Answer(question, str(chosen), chosen == key_number, seconds)


def check(record: Any) -> Session:
    """The session ``record`` describes, checked and scored; ``Invalid`` with every reason."""
    if not isinstance(record, dict):
        raise Invalid([_("a session must be a JSON object")])
    errors: list[str] = []
    if unknown := sorted(set(record) - FIELDS):
        errors.append(_("unknown fields: %(names)s") % {"names": ", ".join(unknown)})
    external_id = _text(record, "external_id", errors, required=False)
    if external_id and {"", ".", ".."} & set(external_id.split("/")):  # its summary's URL
        errors.append(_("external_id is part of a URL: no //, no / at either end, no . or .. part"))
    learner = _text(record, "learner", errors, required=True)
    started, ended = _moment(record, "started_at", errors), _moment(record, "ended_at", errors)
    if started and ended and ended < started:
        errors.append(_("ended_at is before started_at"))
    question_set = None
    if record.get("set") is not None:
        try:
            question_set = question_sets.get(str(record["set"]))
        except StudyQueueError:  # its message lists the sets there are: not the client's
            errors.append(_("no question set named %(name)r") % {"name": record["set"]})
    raw = record.get("answers")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ANSWERS:
        errors.append(_("answers must be a list of 1 to %(max)s answers") % {"max": MAX_ANSWERS})
        raw = []
    known = _questions([_key(a.get("question")) for a in raw if isinstance(a, dict)])
    scored: list[Answer] = []
    seen: set[int] = set()  # questions answered so far, validly or not
    for number, item in enumerate(raw, start=1):
        answer = _answer(item, known)
        reasons = [answer] if isinstance(answer, str) else []
        question = known.get(_key(item.get("question"))) if isinstance(item, dict) else None
        if question is not None:
            if question.pk in seen:
                ref = question.external_id or question.pk
                reasons.append(_("question %(ref)s is answered twice") % {"ref": ref})
            seen.add(question.pk)
        for reason in reasons:
            errors.append(_("answer %(n)s: %(reason)s") % {"n": number, "reason": reason})
        if isinstance(answer, Answer) and not reasons:
            scored.append(answer)
    answered = [_as_recorded(item, known) for item in raw]
    # A set unknown now is no set recorded.
    sent = (learner, started, ended, question_set or record.get("set"), answered)
    if errors and external_id and (row := _resent(external_id, sent)):
        return Session(external_id, row.learner, row.started_at, row.ended_at, None, recorded=row)
    if errors:
        raise Invalid(errors)
    assert learner is not None and started is not None and ended is not None
    return Session(external_id, learner, started, ended, question_set, scored)


def _resent(external_id: str, sent: tuple[object, ...]) -> StudySession | None:
    """The session recorded as ``external_id`` when ``sent`` is it again, sent after a question
    it names was deleted or changed: the same fields, and per answer (``_as_recorded``) the same
    question (an unknown one where a deleted one was), choice and seconds."""
    for row in StudySession.objects.filter(external_id=external_id):
        answers = [(a.question_id, a.chosen, a.seconds) for a in row.answers.all()]
        if (row.learner, row.started_at, row.ended_at, row.question_set, answers) == sent:
            return row
    return None


def _as_recorded(item: Any, known: dict[object, StudyQuestion]) -> tuple[object, ...] | None:
    """An answer as it would be recorded: its question's id (None: unknown), choice, seconds."""
    if not isinstance(item, dict):
        return None
    question = known.get(_key(item.get("question")))
    return (getattr(question, "pk", None), str(item.get("chosen")).strip(), item.get("seconds"))


def record(session: Session) -> tuple[StudySession, bool]:
    """Write ``session`` with its answers; (the session, created). The same session again
    returns the first; the same external id with other content raises ``Conflict``."""
    if session.recorded:
        return session.recorded, False
    fingerprint = session.fingerprint
    sessions = StudySession.objects.all()
    try:
        with transaction.atomic(using=sessions.db):
            row = sessions.create(
                external_id=session.external_id,
                learner=session.learner,
                started_at=session.started_at,
                ended_at=session.ended_at,
                question_set=session.question_set,
                right=sum(answer.correct for answer in session.answers),
                total=len(session.answers),
                fingerprint=fingerprint,
            )
            SessionAnswer.objects.bulk_create(
                SessionAnswer(
                    session=row,
                    position=position,
                    question=answer.question,
                    question_text=answer.question.text,
                    choices=answer.question.choices,
                    chosen=answer.chosen,
                    key=answer.question.answer,
                    correct=answer.correct,
                    seconds=answer.seconds,
                )
                for position, answer in enumerate(session.answers, start=1)
            )
    except IntegrityError:
        # The unique external id: recorded before, or by a concurrent request just now.
        existing = sessions.filter(external_id=session.external_id).first()
        if existing is None:
            raise
        if existing.fingerprint != fingerprint:
            raise Conflict(
                _("session %(id)s was recorded before with other content")
                % {"id": session.external_id}
            ) from None
        return existing, False
    return row, True
