"""A session's figures, computed from the recorded answers, never by the model: the score,
the seconds, the slow answers, per tag against the learner's previous session, each
question's difficulty in the cohort, first tries and what is due next (a Leitner schedule).
Stored with each summary, so its text and its figures agree; the checks read the text
against them."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import reduce
from itertools import groupby
from statistics import median
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q

from studyqueue.conf import conf
from studyqueue.models import SessionAnswer, StudySession
from studyqueue.models.questions import tag_names
from studyqueue.sessions import summaries
from studyqueue.times import local_iso

BOXES = (1, 2, 4, 8, 16)  # days until a question in box 1…5 is due again


def history(learner: str, until: StudySession | None = None) -> list[dict[str, Any]]:
    """The learner's answers to questions that still exist, oldest first (those of sessions
    up to ``until``, itself too), with each question's tags."""
    rows = SessionAnswer.objects.filter(session__learner=learner, question__isnull=False)
    if until is not None:  # started before it, or with it and recorded first (itself too)
        same = Q(session__started_at=until.started_at, session_id__lte=until.pk)
        rows = rows.filter(Q(session__started_at__lt=until.started_at) | same)
    fields = ("session_id", "question_id", "correct", "seconds", "question__external_id")
    ordered = rows.order_by("session__started_at", "session_id", "position")
    found: list[dict[str, Any]] = [dict(r) for r in ordered.values(*fields, "session__ended_at")]
    tags = tag_names({row["question_id"] for row in found})
    for row in found:
        row["tags"] = tags.get(row["question_id"], [])
    return found


def name(row: dict[str, Any]) -> str:
    """A question as the figures name it: its external id, else ``#`` and its id."""
    return row["question__external_id"] or f"#{row['question_id']}"


def due(rows: list[dict[str, Any]], at: datetime) -> list[str]:
    """The questions due at ``at``, the longest due first: a right answer moves a question up
    a box (each starts in the first), a wrong one back to the first; box k is due
    ``BOXES[k-1]`` days after its answer."""
    box: dict[str, int] = {}
    when: dict[str, datetime] = {}
    for row in rows:
        key = name(row)
        box[key] = min(box.get(key, 1) + 1, len(BOXES)) if row["correct"] else 1
        when[key] = row["session__ended_at"] + timedelta(days=BOXES[box[key] - 1])
    return sorted((key for key in when if when[key] <= at), key=when.__getitem__)


def per_tag(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``right`` and ``total`` per tag of the answers in ``rows``."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        for tag in row["tags"]:
            count = counts.setdefault(tag, {"right": 0, "total": 0})
            count["right"] += row["correct"]
            count["total"] += 1
    return counts


def _trend(now: dict[str, int], before: dict[str, int] | None) -> str | None:
    if before is None:
        return None
    change = now["right"] * before["total"] - before["right"] * now["total"]
    return "up" if change > 0 else "down" if change < 0 else "same"


def _cohort(session: StudySession, answers: list[SessionAnswer]) -> tuple[dict, set[int]]:
    """Each question's difficulty (the share of learners whose first answer was right, from
    ``COHORT_MIN`` learners) and the questions of the answers that took longer than nine in
    ten of the cohort's answers to it: two grouped queries."""
    ids = {a.question_id for a in answers if a.question_id}
    # The session's questions again inside: the planner then hashes their answers only.
    start = OuterRef("session__started_at")  # and the first of two sessions started together
    same = Q(session__started_at=start, session_id__lt=OuterRef("session_id"))
    earlier = SessionAnswer.objects.filter(
        Q(session__started_at__lt=start) | same,
        question_id__in=ids,
        question_id=OuterRef("question_id"),
        session__learner=OuterRef("session__learner"),
    )
    firsts = (
        SessionAnswer.objects.filter(question_id__in=ids)
        .exclude(Exists(earlier))
        .order_by()
        .values("question_id")
        .annotate(learners=Count("id"), right=Count("id", filter=Q(correct=True)))  # one each
    )
    difficulty = {
        row["question_id"]: round(row["right"] / row["learners"], 2)
        for row in firsts
        if row["learners"] >= conf.COHORT_MIN
    }
    timed = [a for a in answers if a.question_id and a.seconds is not None]
    faster = [Q(question_id=a.question_id, seconds__lt=a.seconds) for a in timed]
    times = (
        SessionAnswer.objects.filter(question_id__in={a.question_id for a in timed})
        .exclude(seconds=None)
        .order_by()
        .values("question_id")
        .annotate(answers=Count("id"), faster=Count("id", filter=reduce(operator.or_, faster)))
        if timed
        else []
    )
    slow = {
        row["question_id"]
        for row in times
        if row["answers"] >= conf.COHORT_MIN and row["faster"] > 0.9 * row["answers"]
    }
    return difficulty, slow


def of(session: StudySession, answers: list[SessionAnswer]) -> dict[str, Any]:
    """The figures of ``session`` over ``answers`` (those its score counts), as stored with its
    summary and given by the API (docs/howto/sessions.md says what each one means)."""
    right, total = sum(a.correct for a in answers), len(answers)
    seconds = [a.seconds for a in answers if a.seconds is not None]
    middle = median(seconds) if seconds else None
    past = history(session.learner, session)
    # The learner's own pace: the median of every answer of theirs so far, this session's too.
    pace = median([r["seconds"] for r in past if r["seconds"] is not None] or seconds or [0])
    before = [row for row in past if row["session_id"] != session.pk]
    mine = [row for row in past if row["session_id"] == session.pk]
    counted = {a.question_id for a in answers}
    tags = per_tag([row for row in mine if row["question_id"] in counted])
    previous: dict[str, dict[str, int]] = {}
    for _, rows in groupby(before, operator.itemgetter("session_id")):
        previous |= per_tag(rows)  # the last session that had a tag counts
    difficulty, slow_in_cohort = _cohort(session, answers)
    first = {row["question_id"]: row["correct"] for row in reversed(before)}  # the earliest
    missed = [name(row) for row in mine if not row["correct"] and row["question_id"] in counted]
    return {
        "right": right,
        "total": total,
        "percent": round(100 * right / total, 1) if total else None,
        "seconds": {"total": sum(seconds), "median": middle} if seconds else None,
        "slow": [
            a.position
            for a in answers
            if a.seconds is not None and (a.seconds > 2 * pace or a.question_id in slow_in_cohort)
        ],
        "tags": {
            tag: {**count, "trend": _trend(count, previous.get(tag))}
            for tag, count in sorted(tags.items())
        },
        "difficulty": {str(a.position): difficulty.get(a.question_id) for a in answers},
        "first_try": {
            str(a.position): first[a.question_id] for a in answers if a.question_id in first
        },
        "due": missed + [q for q in due(past, session.ended_at) if q not in missed],
    }


def learner(name: str, now: datetime) -> dict[str, Any] | None:
    """A learner's sessions (newest first: when, score, summary state, per tag), per tag over
    all of them, and the questions due at ``now``; None for a learner with no session."""
    sessions = summaries.with_state(StudySession.objects.filter(learner=name))
    if not sessions:
        return None
    past = history(name)
    rows = {pk: list(group) for pk, group in groupby(past, operator.itemgetter("session_id"))}
    return {
        "learner": name,
        "sessions": [
            {
                "session": session.external_id,
                "id": session.pk,
                "started_at": local_iso(session.started_at),
                "right": session.right,
                "total": session.total,
                "summary": summaries.status(session),
                "tags": per_tag(rows.get(session.pk, [])),
            }
            for session in sessions
        ],
        "tags": dict(sorted(per_tag(past).items())),
        "due": due(past, now),
    }
