"""The review queue: which explanations wait for a reviewer, riskiest first, and a reviewer's
decision, applied in one transaction only to what the reviewer saw (``Seen``): of two reviewers
on one item, the second is refused (docs/operators-guide.md, "Review")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.utils.text import normalize_newlines
from django.utils.translation import gettext as _

from studyqueue.exceptions import ReviewConflict, UnchangedEdit
from studyqueue.explanations import next_step, revisions
from studyqueue.models import (
    ExplanationRevision,
    FinishReason,
    JobKind,
    QuestionQuerySet,
    ReviewStatus,
    StudyQuestion,
    StudyQuestionJob,
    unstorable,
)

logger = logging.getLogger("studyqueue.review")

COUNT_CAP = 10_000  # never counted further (as the dashboard's other tiles)


# What a reviewer can decide on an item: the review status it leaves.
DECISIONS = (ReviewStatus.APPROVED, ReviewStatus.REJECTED, ReviewStatus.EDITED)


@dataclass(frozen=True)
class Item:
    """One question to review: the revision to judge and the one before it."""

    question: StudyQuestion
    revision: ExplanationRevision
    previous: ExplanationRevision | None  # for a candidate: the current one it would replace

    @property
    def seen(self) -> Seen:
        """What the page shows of it, for its form to carry."""
        return Seen.of(self.question, self.revision)


@dataclass(frozen=True)
class Seen:
    """An item as a reviewer's page showed it: a decision applies only while it holds."""

    review: revisions.ReviewState
    current_revision_id: int | None
    content: str  # StudyQuestion.content_hash()

    @classmethod
    def of(cls, question: StudyQuestion, revision: ExplanationRevision) -> Seen:
        return cls(
            revisions.ReviewState.of(revision),
            question.current_revision_id,
            question.content_hash(),
        )

    def token(self) -> str:
        """For a hidden form field (``parse`` reads it back)."""
        review = self.review
        when = review.reviewed_at.isoformat() if review.reviewed_at else ""
        current = self.current_revision_id or ""
        return f"{review.review_status}|{when}|{int(review.candidate)}|{current}|{self.content}"

    @classmethod
    def parse(cls, token: str) -> Seen:
        """``ValueError`` for anything ``token`` did not write."""
        status, reviewed_at, candidate, current, content = token.split("|")  # else ValueError
        when = datetime.fromisoformat(reviewed_at) if reviewed_at else None
        if (
            status not in ReviewStatus.values
            or candidate not in ("0", "1")
            or (current and not (current.isascii() and current.isdigit() and len(current) <= 18))
            or (when is not None and when.tzinfo is None)
        ):
            raise ValueError("not a review state")
        review = revisions.ReviewState(status, when, candidate == "1")
        return cls(review, int(current) if current else None, content)


# The order a reviewer meets explanations in, riskiest first; the rest come after.
RISK_ORDER = (
    revisions.WRONG_STEP,
    revisions.VERIFIER_DISAGREES,
    revisions.ANSWER_MISMATCH,
    revisions.VERIFIER_UNSURE,
    revisions.STEP_CHECK_UNSURE,
)


def _risk() -> Case:
    """A question's rank in ``RISK_ORDER`` (flags matched as ``QuestionQuerySet.flagged``)."""
    ranks = [
        When(explanation_flags__icontains=f'"{flag}"', then=Value(rank))
        for rank, flag in enumerate(RISK_ORDER)
    ]
    return Case(*ranks, default=Value(len(RISK_ORDER)), output_field=IntegerField())


def waiting() -> QuestionQuerySet:
    """Questions a reviewer has to decide on, riskiest first, each with its ``risk`` rank."""
    return StudyQuestion.objects.needs_review().annotate(risk=_risk()).order_by("risk", "pk")


def judged(question: StudyQuestion) -> ExplanationRevision | None:
    """The revision to judge: the newest waiting candidate, else the current one."""
    revisions_ = ExplanationRevision.objects.filter(question=question)
    candidate = revisions_.filter(candidate=True).order_by("-pk").first()
    if candidate is not None or question.current_revision_id is None:
        return candidate
    return revisions_.filter(pk=question.current_revision_id).first()


def item(question_id: int) -> Item | None:
    """The review item of a question (waiting or not); None without an explanation."""
    question = StudyQuestion.objects.filter(pk=question_id).first()
    revision = judged(question) if question is not None else None
    if question is None or revision is None:
        return None
    previous: ExplanationRevision | None = None
    if not revision.candidate:
        previous = revisions.previous(revision)
    elif question.current_revision_id is not None:  # what the candidate would replace
        previous = ExplanationRevision.objects.get(pk=question.current_revision_id)
    return Item(question, revision, previous)


def next_id(after: int | None = None, *, backwards: bool = False) -> int | None:
    """The waiting question after (or before) ``after``, wrapping around; None if none."""
    queryset = waiting()
    if backwards:
        queryset = queryset.order_by(F("risk").desc(), F("pk").desc())
    if after is not None:
        rank = StudyQuestion.objects.filter(pk=after).annotate(risk=_risk())
        where = rank.values_list("risk", flat=True).first()
        if where is not None:
            later = Q(risk__gt=where) | Q(risk=where, pk__gt=after)
            earlier = Q(risk__lt=where) | Q(risk=where, pk__lt=after)
            found = queryset.filter(earlier if backwards else later)
            step = found.values_list("pk", flat=True).first()
            if step is not None:
                return step
    return queryset.values_list("pk", flat=True).first()


def counts() -> tuple[int, int]:
    """Questions waiting for a reviewer, and of them the flagged ones (each capped)."""
    queryset = waiting().order_by()
    flagged = queryset.exclude(explanation_flags=[])
    return queryset.values("pk")[:COUNT_CAP].count(), flagged.values("pk")[:COUNT_CAP].count()


@dataclass(frozen=True)
class Result:
    """What a decision did: the revision it decided on, the one now current, a queued job."""

    decided: ExplanationRevision
    current: ExplanationRevision | None
    job_id: int | None = None


def decision_text(decision: str, text: str) -> str:
    """A reviewer's decision on a written text (an explanation or a summary), checked before
    anything is read: the corrected text as stored (an edit), else ``ValueError``."""
    if decision not in DECISIONS:
        raise ValueError(f"{decision!r} is no review decision")
    if decision != ReviewStatus.EDITED:
        return ""
    text = normalize_newlines(text).strip()
    if not text:
        raise ValueError(_("the corrected text is empty"))
    if unstorable(text):
        raise ValueError(
            _("the text holds a character that cannot be stored (a NUL or a lone surrogate)")
        )
    return text


def decide(
    revision_id: int, decision: ReviewStatus, *, by: str, text: str = "", seen: Seen | None = None
) -> Result:
    """Apply a reviewer's decision on ``revision_id`` while it is its question's item as
    ``seen`` (default: now): else ``ReviewConflict``, and nothing is written. ``UnchangedEdit``
    for an edit that changes nothing, ``ValueError`` for a bad correction or decision."""
    text = decision_text(decision, text)
    revisions_ = ExplanationRevision.objects.all()
    with transaction.atomic(using=revisions_.db):
        question_id = revisions_.filter(pk=revision_id).values_list("question", flat=True).first()
        # The question's lock orders this decision with other reviewers, a stored reply and
        # an edit (each locks it too); the revision is read after it.
        question = revision = None
        if question_id is not None:
            question = StudyQuestion.objects.select_for_update().filter(pk=question_id).first()
            revision = revisions_.filter(pk=revision_id).first()
        if revision is None or question is None or judged(question) != revision:
            raise ReviewConflict(
                _("this explanation changed meanwhile (another reviewer, or a newer reply)")
            )
        seen = seen or Seen.of(question, revision)
        if seen.content != question.content_hash():
            raise ReviewConflict(_("the question changed meanwhile (its text, choices or answer)"))
        if decision is ReviewStatus.EDITED and normalize_newlines(revision.text).strip() == text:
            raise UnchangedEdit(
                _("the text is the same as revision %(revision)s") % {"revision": revision.pk}
            )
        if seen.current_revision_id != question.current_revision_id:
            # What a candidate would replace is not what the page showed: a candidate
            # accepted by another reviewer, or another revision made current.
            if revisions.ReviewState.of(revision) != seen.review:
                raise ReviewConflict(_("another reviewer decided first"))
            raise ReviewConflict(
                _("this explanation changed meanwhile (another reviewer, or a newer reply)")
            )
        was_candidate = revision.candidate
        # The compare-and-set: the revision's review must still be what the page showed.
        if not revisions.decide(revision, decision, by=by, seen=seen.review):
            raise ReviewConflict(_("another reviewer decided first"))
        if decision is ReviewStatus.APPROVED:
            if was_candidate:
                revisions.make_current(revision)
            return Result(decided=revision, current=revision)
        if decision is ReviewStatus.REJECTED:
            if was_candidate:  # the approved explanation stays; nothing to regenerate
                return Result(decided=revision, current=None)
            # What it needs next: its key audit first, where the key's audit is void.
            next_step.queue_jobs([question.pk])
            jobs = StudyQuestionJob.objects.active().filter(study_question=question)
            job_id = jobs.filter(kind=JobKind.EXPLANATION).values_list("pk", flat=True).first()
            return Result(decided=revision, current=revision, job_id=job_id)
        # Checked as a model's reply is: a correction may argue for another answer too.
        checked = revisions.check(question, text, FinishReason.STOP)
        corrected = revisions.add_correction(
            revision, text, by=by, flags=checked.flags, stated_answer=checked.stated
        )
        revisions.make_current(corrected)
        return Result(decided=revision, current=corrected)
