"""Question sets ("the 2026 midterm"): named batches of questions, and how far each is.

A set's progress is its questions' explanations: each question is **approved** (a reviewer
approved or wrote its explanation), **flagged** (explained, with a quality flag, not
approved), **explained** (the rest of the explained), **failed** (no explanation, its last
explanation job failed and none is active) or **waiting**. A set is done when nothing waits.
When it will be done is ``queue.eta``'s estimate for its waiting questions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext

from studyqueue.exceptions import StudyQueueError
from studyqueue.models import (
    ACTIVE_STATUSES,
    PROTECTED_REVIEWS,
    JobKind,
    JobStatus,
    QuestionQuerySet,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
    fit,
)
from studyqueue.queue import eta


class SetNotFound(StudyQueueError):
    """No question set has that name."""


def get(name: str) -> StudyQuestionSet:
    """The set named ``name``; raises ``SetNotFound`` (with the names there are)."""
    found = StudyQuestionSet.objects.filter(name=name).first()
    if found is None:
        names = list(StudyQuestionSet.objects.order_by("name").values_list("name", flat=True)[:10])
        known = ", ".join(names) if names else gettext("none yet")
        raise SetNotFound(
            gettext("no question set named %(name)r (sets: %(known)s)")
            % {"name": name, "known": known}
        )
    return found


def add(
    name: str, question_ids: Iterable[int], *, deadline: datetime | None = None
) -> tuple[StudyQuestionSet, int]:
    """Put the questions in the set named ``name`` (created if new; its deadline set when
    one is given); the set, and how many questions were not in it yet."""
    name = name.strip()
    if not name:
        raise StudyQueueError(gettext("a question set needs a name"))
    ids = sorted(set(question_ids))
    sets = StudyQuestionSet.objects.all()
    with transaction.atomic(using=sets.db):
        question_set, _ = sets.get_or_create(name=fit(StudyQuestionSet, "name", name))
        if deadline is not None and question_set.deadline != deadline:
            question_set.deadline = deadline
            question_set.save(update_fields=["deadline"])
        members = StudyQuestionSet.questions.through.objects.using(sets.db)
        before = members.filter(studyquestionset=question_set).count()
        question_set.questions.add(*ids)
        after = members.filter(studyquestionset=question_set).count()
    return question_set, after - before


def questions(question_set: StudyQuestionSet) -> QuestionQuerySet:
    """The set's questions."""
    return StudyQuestion.objects.filter(sets=question_set)


@dataclass(frozen=True)
class Progress:
    """How far a set is (see the module for the states)."""

    name: str
    total: int
    explained: int  # every explained question: approved and flagged ones included
    approved: int
    flagged: int
    failed: int
    waiting: int
    deadline: datetime | None
    started_at: datetime | None  # its first explanation job's first claim
    finished_at: datetime | None  # when its last job ended, once it is done
    rate: eta.Rate | None  # what the estimate is based on
    eta_seconds: float | None  # None: done, or no rate yet

    @property
    def done(self) -> bool:
        return self.total > 0 and self.waiting == 0

    @property
    def plain(self) -> int:
        """Explained, neither approved nor flagged."""
        return self.explained - self.approved - self.flagged

    @property
    def finishes_at(self) -> datetime | None:
        """When it will be done at the current rate (None: done, or no rate)."""
        if self.eta_seconds is None:
            return None
        return timezone.now() + timedelta(seconds=self.eta_seconds)

    @property
    def late_by(self) -> timedelta | None:
        """How late it will be against its deadline at the current rate (None: no deadline,
        no estimate, or in time)."""
        finishes = self.finishes_at
        if self.deadline is None or finishes is None or finishes <= self.deadline:
            return None
        return finishes - self.deadline

    def as_json(self) -> dict[str, object]:
        """``setstatus --json``."""
        return {
            "name": self.name,
            "total": self.total,
            "completed": self.explained,
            "approved": self.approved,
            "flagged": self.flagged,
            "failed": self.failed,
            "waiting": self.waiting,
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds),
            "eta_basis": self.rate.basis if self.rate is not None and not self.done else None,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "done": self.done,
        }


def progress(question_set: StudyQuestionSet, now: datetime | None = None) -> Progress:
    """How far ``question_set`` is now."""
    now = now or timezone.now()
    members = questions(question_set)
    jobs = StudyQuestionJob.objects.filter(study_question=OuterRef("pk"), kind=JobKind.EXPLANATION)
    explained = ~Q(explanation="")
    approved = explained & Q(current_revision__review_status__in=PROTECTED_REVIEWS)
    counts = members.annotate(
        active=Exists(jobs.filter(status__in=ACTIVE_STATUSES)),
        last=Subquery(jobs.order_by("-pk").values("status")[:1]),
    ).aggregate(
        total=Count("pk"),
        explained=Count("pk", filter=explained),
        approved=Count("pk", filter=approved),
        flagged=Count("pk", filter=explained & ~Q(explanation_flags=[]) & ~approved),
        # Not explained, its last explanation job failed, and none is active.
        failed=Count("pk", filter=Q(explanation="", active=False, last=JobStatus.FAILED)),
    )
    waiting = counts["total"] - counts["explained"] - counts["failed"]
    times = StudyQuestionJob.objects.filter(
        study_question__in=members.values("pk"), kind=JobKind.EXPLANATION
    ).aggregate(started=Min("started_at"), ended=Max("completed_at"))
    rate = eta.rate_for(now, members.values("pk")) if waiting else None
    return Progress(
        name=question_set.name,
        total=counts["total"],
        explained=counts["explained"],
        approved=counts["approved"],
        flagged=counts["flagged"],
        failed=counts["failed"],
        waiting=waiting,
        deadline=question_set.deadline,
        started_at=times["started"],
        finished_at=times["ended"] if counts["total"] and not waiting else None,
        rate=rate,
        eta_seconds=rate.seconds_for(waiting) if rate is not None else None,
    )
