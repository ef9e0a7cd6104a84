"""Study sessions from xAPI statements: a learning app's ``answered`` statements, grouped by
``context.registration``, are one session, recorded (``recording``) with its summary job when a
``completed`` or ``terminated`` statement for it arrives, or ``SESSION_IDLE_MINUTES`` after its
last statement. Statements are kept by id: the same one again is nothing new."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime, parse_duration
from django.utils.translation import gettext as _

from studyqueue.conf import conf
from studyqueue.models import StudySession, XapiStatement, unstorable
from studyqueue.sessions import recording, summaries

logger = logging.getLogger("studyqueue.xapi")

ADL = "http://adlnet.gov/expapi/verbs/"
ANSWERED = ADL + "answered"
ENDS = {ADL + "completed", ADL + "terminated"}
VERSION = re.compile(r"[12]\.0(\.[0-9]+)?")  # X-Experience-API-Version: 1.0.x or 2.0.x
LRS_SET = {"stored", "authority", "version"}  # properties an LRS sets: not what was said


def _at(value: Any, *path: str) -> Any:
    """``value[path[0]][path[1]]…``; None where a step is not an object or has no such key."""
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _row(statement: Any, stored_at: datetime | None) -> XapiStatement | str:
    """The statement as stored (``stored_at`` None: its own timestamp), or why it cannot be."""
    if not isinstance(statement, dict):
        return _("not an object")
    try:
        statement_id = uuid.UUID(statement.get("id") or str(uuid.uuid4()))
    except (TypeError, ValueError, AttributeError):
        return _("id is not a UUID")
    verb = _at(statement, "verb", "id")
    if not isinstance(verb, str):
        return _("verb.id is missing")
    registration = ""
    if verb == ANSWERED or verb in ENDS:
        try:
            registration = str(uuid.UUID(_at(statement, "context", "registration")))
        except (TypeError, ValueError, AttributeError):
            return _("context.registration, the session it belongs to, is not a UUID")
    when = statement.get("timestamp")
    try:
        moment = parse_datetime(when) if isinstance(when, str) else timezone.now()
        moment = moment.astimezone(UTC) if moment and timezone.is_aware(moment) else None
    except (ValueError, OverflowError):  # year 1 at +09:00 is before the first UTC time
        moment = None
    if moment is None:
        return _("timestamp is not a date and time with its offset (years 1-9999 UTC)")
    said = {k: v for k, v in statement.items() if k not in LRS_SET} | {"id": str(statement_id)}
    text = json.dumps(said, sort_keys=True, ensure_ascii=False)
    if unstorable(text) or "\\u0000" in text:  # PostgreSQL's jsonb refuses both
        return _("not valid Unicode (a NUL, a lone surrogate, or bytes that are not UTF-8)")
    return XapiStatement(
        statement_id=statement_id,
        verb=verb,
        registration=registration,
        timestamp=moment,
        stored_at=stored_at or moment,
        digest=hashlib.sha256(text.encode()).hexdigest(),
        body=said,
    )


def _answer(statement: dict[str, Any]) -> dict[str, Any]:
    """The answer an ``answered`` statement gives, as ``recording`` reads it."""
    ref = _at(statement, "object", "id")
    if isinstance(ref, str):  # its last path segment is the question's external id
        ref = unquote(re.split("[?#]", ref)[0].rstrip("/").rsplit("/", 1)[-1])
    chosen = response = _at(statement, "result", "response")
    if isinstance(response, str) and re.fullmatch("[0-9]{1,4}", response):
        chosen = int(response)
    choices = _at(statement, "object", "definition", "choices")
    for choice in choices if isinstance(choices, list) else []:
        text = _at(choice, "description")
        if _at(choice, "id") == response and isinstance(text, dict) and text:
            chosen = text.get("ko") or next(iter(text.values()))
    duration = _at(statement, "result", "duration")
    took = parse_duration(duration) if isinstance(duration, str) else None
    seconds = duration if took is None else round(took.total_seconds())
    return {"question": ref, "chosen": chosen, "seconds": seconds}


def _learner(statement: dict[str, Any]) -> Any:
    mbox = _at(statement, "actor", "mbox")
    mbox = mbox.removeprefix("mailto:") if isinstance(mbox, str) else None
    return (
        _at(statement, "actor", "account", "name")
        or mbox
        or _at(statement, "actor", "mbox_sha1sum")
    )


def session(registration: str) -> recording.Session:
    """The session of ``registration``'s statements, checked (``recording.Invalid``)."""
    rows = list(XapiStatement.objects.filter(registration=registration))
    answered = [row.body for row in rows if row.verb == ANSWERED]
    answers: dict[Any, dict[str, Any]] = {}
    for statement in answered:  # the first answer to a question counts
        answer = _answer(statement)
        answers.setdefault(json.dumps(answer["question"]), answer)
    learners = {json.dumps(_learner(s)) for s in answered}
    try:
        if len(learners) > 1:
            raise recording.Invalid([_("its statements name more than one learner")])
        return recording.check(
            {
                "external_id": registration,
                "learner": _learner(answered[0]) if answered else None,
                "started_at": min(row.timestamp for row in rows).isoformat(),
                "ended_at": max(row.timestamp for row in rows).isoformat(),
                "answers": list(answers.values()),
            }
        )
    except recording.Invalid as exc:
        raise recording.Invalid(
            [
                _("registration %(id)s: %(reason)s") % {"id": registration, "reason": r}
                for r in exc.reasons
            ]
        ) from None


def _record(registration: str) -> StudySession | None:
    """Record ``registration``'s session and queue its summary; None if it was recorded."""
    row, created = recording.record(session(registration))
    XapiStatement.objects.filter(registration=registration).update(session=row)
    if created:
        summaries.queue_summaries([row])
    return row if created else None


def receive(statements: Iterable[Any], stored_at: datetime | None) -> tuple[list[str], int]:
    """Store ``statements`` (all or none) and record the sessions they end: (every statement's
    id, sessions recorded). ``recording.Invalid`` with every reason; ``recording.Conflict``
    for a known id with other content."""
    rows, reasons = [], []
    for number, statement in enumerate(statements, start=1):
        row = _row(statement, stored_at)
        if isinstance(row, str):
            reasons.append(_("statement %(n)s: %(reason)s") % {"n": number, "reason": row})
        else:
            rows.append(row)
    if reasons or not rows:
        raise recording.Invalid(reasons or [_("no statement")])
    try:
        recorded = _store(rows)
    except IntegrityError:  # a concurrent request stored the same statements just now
        recorded = _store(rows)
    return [str(row.statement_id) for row in rows], recorded


def _store(rows: list[XapiStatement]) -> int:
    """Store the new ones of ``rows``; record the sessions they end (how many)."""
    with transaction.atomic(using=XapiStatement.objects.all().db):
        known = XapiStatement.objects.filter(statement_id__in=[r.statement_id for r in rows])
        stored = dict(known.values_list("statement_id", "digest"))
        new: dict[uuid.UUID, XapiStatement] = {}
        for row in rows:
            if (
                stored.get(row.statement_id) or new.setdefault(row.statement_id, row).digest
            ) != row.digest:
                raise recording.Conflict(
                    _("statement %(id)s was sent before with other content")
                    % {"id": row.statement_id}
                )
        touched = {row.registration for row in new.values() if row.registration}
        done = XapiStatement.objects.filter(registration__in=touched, session__isnull=False)
        if closed := sorted(set(done.values_list("registration", flat=True))):
            raise recording.Invalid(
                [
                    _("registration %(id)s is complete: its session was recorded") % {"id": r}
                    for r in closed
                ]
            )
        XapiStatement.objects.bulk_create(new.values())
        ending = {row.registration for row in new.values() if row.verb in ENDS}
        for registration in touched - ending:
            session(registration)  # every reason now, not when it is recorded
        recorded = [_record(registration) for registration in sorted(ending)]
    return sum(row is not None for row in recorded)


def close_idle(now: datetime) -> int:
    """Record the sessions of the registrations whose last statement was stored over
    ``SESSION_IDLE_MINUTES`` ago; how many. One that no longer checks is logged and left."""
    idle = now - timedelta(minutes=conf.SESSION_IDLE_MINUTES)
    waiting = XapiStatement.objects.filter(session__isnull=True).exclude(registration="")
    # A statement stored as an idle sweep recorded its session (a race the request lost) is
    # late: it stays a statement.
    closed = XapiStatement.objects.filter(session__isnull=False).values("registration")
    waiting = waiting.exclude(registration__in=closed)
    due = waiting.values("registration").annotate(last=Max("stored_at")).filter(last__lt=idle)
    recorded = 0
    for registration in due.values_list("registration", flat=True):
        try:
            with transaction.atomic(using=waiting.db):
                recorded += _record(registration) is not None
        except (recording.Invalid, recording.Conflict) as exc:
            logger.warning(
                "study_xapi_unrecorded registration=%s reason=%r", registration, str(exc)
            )
    return recorded
