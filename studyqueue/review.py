"""The review queue: which explanations wait for a reviewer, in what order, and a reviewer's
decision (approve, reject, edit), each in one transaction.

An item is a question and the revision to judge: the newest *candidate* waiting to replace
an approved or edited explanation, else the current explanation. Approve keeps it (a
candidate becomes current); Reject marks it and, for a current explanation, queues a
regeneration through ``queue.enqueue``; Edit keeps the reviewer's text as a new current
revision authored by them. Revisions are written by ``studyqueue.revisions`` only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from django.db import transaction
from django.utils.translation import gettext as _

from studyqueue import queue, revisions
from studyqueue.exceptions import ReviewConflict
from studyqueue.models import (
    ExplanationRevision,
    JobKind,
    QuestionQuerySet,
    ReviewStatus,
    StudyQuestion,
)

logger = logging.getLogger("studyqueue.review")

COUNT_CAP = 10_000  # never counted further (as the dashboard's other tiles)


class Decision(StrEnum):
    """What a reviewer can do with an item."""

    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"


@dataclass(frozen=True)
class Item:
    """One question to review: the revision to judge and the one before it."""

    question: StudyQuestion
    revision: ExplanationRevision
    previous: ExplanationRevision | None  # for a candidate: the current one it would replace

    @property
    def is_candidate(self) -> bool:
        return self.revision.candidate


def _questions() -> QuestionQuerySet:
    return StudyQuestion.objects.using(queue.database())


def waiting() -> QuestionQuerySet:
    """Questions a reviewer has to decide on (``needs_review``), in id order."""
    return _questions().needs_review().order_by("pk")


def judged(question: StudyQuestion) -> ExplanationRevision | None:
    """The revision to judge: the newest waiting candidate, else the current one."""
    revisions_ = ExplanationRevision.objects.using(queue.database()).filter(question=question)
    candidate = revisions_.filter(candidate=True).order_by("-pk").first()
    if candidate is not None:
        return candidate
    if question.current_revision_id is None:
        return None
    return revisions_.filter(pk=question.current_revision_id).first()


def item(question_id: int) -> Item | None:
    """The review item of a question (waiting or not); None without an explanation."""
    question = _questions().filter(pk=question_id).first()
    if question is None:
        return None
    revision = judged(question)
    if revision is None:
        return None
    previous: ExplanationRevision | None = None
    if not revision.candidate:
        previous = revisions.previous(revision)
    elif question.current_revision_id is not None:  # what the candidate would replace
        previous = ExplanationRevision.objects.using(queue.database()).get(
            pk=question.current_revision_id
        )
    return Item(question, revision, previous)


def next_id(after: int | None = None, *, backwards: bool = False) -> int | None:
    """The waiting question after (or before) ``after`` in id order, wrapping around; None
    when nothing waits."""
    queryset = waiting()
    if after is not None:
        step = (
            queryset.filter(pk__lt=after).order_by("-pk")
            if backwards
            else queryset.filter(pk__gt=after)
        )
        found = step.values_list("pk", flat=True).first()
        if found is not None:
            return found
    ends = queryset.order_by("-pk") if backwards else queryset
    return ends.values_list("pk", flat=True).first()


def counts() -> tuple[int, int]:
    """Questions waiting for a reviewer, and of them the flagged ones (each capped)."""
    queryset = waiting().order_by()
    flagged = queryset.exclude(explanation_flags=[])
    return (
        queryset.values("pk")[:COUNT_CAP].count(),
        flagged.values("pk")[:COUNT_CAP].count(),
    )


@dataclass(frozen=True)
class Result:
    """What a decision did: the revision it decided on, the one now current, a queued job."""

    decided: ExplanationRevision
    current: ExplanationRevision | None
    job_id: int | None = None


def decide(revision_id: int, decision: Decision, *, by: str, text: str = "") -> Result:
    """Apply a reviewer's decision on ``revision_id``, which must still be its question's
    item (``ReviewConflict`` if another reviewer or a newer reply came first)."""
    db = queue.database()
    with transaction.atomic(using=db):
        revision = ExplanationRevision.objects.using(db).filter(pk=revision_id).first()
        # The question's lock orders this decision with other reviewers and the consumer
        # storing a reply (it locks the question too).
        question = None
        if revision is not None:
            question = _questions().select_for_update().filter(pk=revision.question_id).first()
        if revision is None or question is None or judged(question) != revision:
            raise ReviewConflict(
                _("this explanation changed meanwhile (another reviewer, or a newer reply)")
            )
        if decision is Decision.APPROVE:
            return _approve(revision, by)
        if decision is Decision.REJECT:
            return _reject(question, revision, by)
        return _edit(revision, text, by)


def _approve(revision: ExplanationRevision, by: str) -> Result:
    if revision.candidate:
        revisions.make_current(revision)
    revisions.decide(revision, ReviewStatus.APPROVED, by=by)
    return Result(decided=revision, current=revision)


def _reject(question: StudyQuestion, revision: ExplanationRevision, by: str) -> Result:
    was_candidate = revision.candidate
    revisions.decide(revision, ReviewStatus.REJECTED, by=by)
    if was_candidate:  # the approved explanation stays; nothing to regenerate
        return Result(decided=revision, current=None)
    job = queue.enqueue(question, JobKind.EXPLANATION).job
    return Result(decided=revision, current=revision, job_id=job.pk)


def _edit(revision: ExplanationRevision, text: str, by: str) -> Result:
    text = text.strip()
    if not text:
        raise ValueError(_("the corrected text is empty"))
    if text == revision.text.strip():  # nothing corrected: the reviewer approves it as it is
        return _approve(revision, by)
    correction = revisions.add_correction(revision, text, by=by)
    revisions.make_current(correction)
    revisions.decide(revision, ReviewStatus.EDITED, by=by)
    return Result(decided=revision, current=correction)
