"""Question sets ("the 2026 midterm"): named batches of questions, and how far each is (the
states: docs/howto/exam-sets.md); a set is done when nothing waits and no check job of its
questions runs, so that its one notice (``sets.notices``) carries the checks' verdicts."""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext

from studyqueue import times
from studyqueue.exceptions import StudyQueueError
from studyqueue.explanations.revisions import VERIFIER_FLAGS
from studyqueue.models import (
    ACTIVE_STATUSES,
    CHECK_KINDS,
    PROTECTED_REVIEWS,
    JobKind,
    JobStatus,
    KeyAudit,
    QuestionQuerySet,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
    width,
)
from studyqueue.queue.enqueue import set_deadlines
from studyqueue.sets import eta

logger = logging.getLogger("studyqueue.sets")


# How an explanation job can end without an explanation: the set counts those as failed.
ENDED_UNEXPLAINED = (JobStatus.FAILED, JobStatus.SKIPPED)

# The check jobs a set's completion waits for, so that its notice carries their verdicts.

# A deadline this close, explanations waiting and no estimate (nothing completed lately: the
# servers stalled) is warned about: no rate can say it will be made.
DEADLINE_NEAR = timedelta(hours=1)


class SetNameError(StudyQueueError):
    """A name that names no question set: one no set can have, or one no set has."""


class BadSetName(SetNameError):
    """A name no question set can have (empty, too long, a control character)."""


# Characters a set's name cannot hold: control characters (a line break in a mail subject
# loses the owner's mail), line and paragraph separators, and lone surrogates.
_NOT_IN_NAMES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def clean_name(name: str) -> str:
    """``name`` as every entry point stores and looks it up: NFC (a Korean name typed as NFD on
    macOS is the same set) and stripped. ``BadSetName`` for an empty name, a control character
    or line break, or one longer than the column (cutting it would merge two exams)."""
    name = unicodedata.normalize("NFC", name).strip()
    if not name:
        raise BadSetName(gettext("a question set needs a name"))
    for position, char in enumerate(name, start=1):
        if unicodedata.category(char) in _NOT_IN_NAMES:
            raise BadSetName(
                gettext(
                    "a question set's name cannot hold a line break or control character "
                    "(U+%(code)04X at character %(position)s)"
                )
                % {"code": ord(char), "position": position}
            )
    limit = width(StudyQuestionSet, "name")
    if len(name) > limit:
        raise BadSetName(
            gettext(
                "a question set's name is at most %(limit)s characters; this one has %(length)s"
            )
            % {"limit": limit, "length": len(name)}
        )
    return name


def get(name: str) -> StudyQuestionSet:
    """The set named ``name``; ``BadSetName``, or ``SetNameError`` with the names there are."""
    found = StudyQuestionSet.objects.filter(name=clean_name(name)).first()
    if found is None:
        names = list(StudyQuestionSet.objects.order_by("name").values_list("name", flat=True)[:10])
        known = ", ".join(names) if names else gettext("none yet")
        raise SetNameError(
            gettext("no question set named %(name)r (sets: %(known)s)")
            % {"name": name, "known": known}
        )
    return found


def add(
    name: str, question_ids: Iterable[int], *, deadline: datetime | None = None
) -> tuple[StudyQuestionSet, int]:
    """Put the questions in the set named ``name`` (created if new, its deadline set when one
    is given); the set, and how many questions were not in it yet."""
    name = clean_name(name)
    ids = sorted(set(question_ids))
    sets = StudyQuestionSet.objects.all()
    with transaction.atomic(using=sets.db):
        question_set, _ = sets.get_or_create(name=name)
        if deadline is not None and question_set.deadline != deadline:
            question_set.deadline = deadline
            question_set.save(update_fields=["deadline"])
        members = StudyQuestionSet.questions.through.objects.using(sets.db)
        before = members.filter(studyquestionset=question_set).count()
        question_set.questions.add(*ids)
        after = members.filter(studyquestionset=question_set).count()
        if after != before:
            # Its membership changed: the sweep looks at it again even if no job ends (the
            # questions added may be explained already), and notices it when done.
            StudyQuestionSet.objects.filter(pk=question_set.pk).update(noticed_through=None)
        if question_set.deadline is not None:
            # Their queued jobs now go by the set's deadline too (or an earlier one).
            set_deadlines(ids if deadline is None else _member_ids(question_set))
    return question_set, after - before


def deadline_changed(question_set: StudyQuestionSet) -> int:
    """The set's deadline was changed (its admin page): its questions' queued jobs follow."""
    return set_deadlines(_member_ids(question_set))


def _member_ids(question_set: StudyQuestionSet) -> list[int]:
    return list(questions(question_set).values_list("pk", flat=True))


def questions(question_set: StudyQuestionSet) -> QuestionQuerySet:
    return StudyQuestion.objects.filter(sets=question_set)


def counts_line(progress: Progress) -> str:
    """The set's counts in one line ("2026 midterm: 42 of 180 explained (…), 137 waiting")."""
    return gettext(
        "%(name)s: %(explained)s of %(total)s explained (%(approved)s approved, "
        "%(flagged)s flagged), %(failed)s failed, %(waiting)s waiting"
    ) % vars(progress)


def checks_line(progress: Progress) -> str | None:
    """The set's checks in one line; None when no check of its questions has run or runs."""
    if not (progress.key_audited or progress.verified or progress.checking):
        return None
    return gettext(
        "checks: %(audited)s keys audited (%(disputed)s disputed), %(verified)s explanations "
        "verified (%(flagged)s flagged by the verifier)"
    ) % {
        "audited": progress.key_audited,
        "disputed": progress.key_disputed,
        "verified": progress.verified,
        "flagged": progress.verifier_flagged,
    }


def status_lines(progress: Progress) -> list[str]:
    """The set's status as people read it (``setstatus``, its admin page)."""
    started = (
        gettext("started %(at)s") % {"at": times.shown(progress.started_at)}
        if progress.started_at
        else gettext("not started yet")
    )
    if progress.empty:
        timing = gettext("empty: it has no questions, so nothing is waiting")
    elif progress.done:
        timing = gettext("done %(at)s") % {"at": times.shown(progress.finished_at)}
    elif not progress.waiting and progress.checking:
        # No explanation left to estimate: what holds it is the checks.
        timing = gettext("every explanation ended; checks still running on %(n)s question(s)") % {
            "n": progress.checking
        }
    elif progress.eta_seconds is None or progress.rate is None:
        timing = gettext("no estimate yet: no explanation completed in the last 10 min")
    else:
        timing = gettext("finishes about %(at)s (in %(left)s), %(basis)s") % {
            "at": times.shown(progress.finishes_at),
            "left": times.short_duration(timedelta(seconds=progress.eta_seconds)),
            "basis": progress.rate.basis,
        }
    lines = [counts_line(progress), f"{started}; {timing}"]
    if (checks := checks_line(progress)) is not None:
        lines.append(checks)
    if progress.deadline is not None:
        lines.append(
            gettext("deadline %(deadline)s: %(verdict)s")
            % {"deadline": times.shown(progress.deadline), "verdict": _verdict(progress)}
        )
    return lines


def _verdict(progress: Progress) -> str:
    """Whether the set makes its deadline (it has one)."""
    if progress.empty:
        return gettext("nothing to do, the set is empty")
    if progress.done:
        finished, deadline = progress.finished_at, progress.deadline
        made = finished is not None and deadline is not None and finished <= deadline
        return gettext("made it") if made else gettext("finished after it")
    if (late := progress.late_by) is not None:
        return gettext("about %(late)s late at the current rate") % {
            "late": times.short_duration(late)
        }
    if (overdue := progress.overdue) is not None:
        # Past is late whatever the estimate says (or whether there is one).
        return gettext("already %(late)s late, not done yet") % {
            "late": times.short_duration(overdue)
        }
    if progress.stalled_near_deadline and (due_in := progress.due_in) is not None:
        return gettext("at risk: due in %(left)s and no estimate") % {
            "left": times.short_duration(due_in)
        }
    if progress.eta_seconds is None:
        return gettext("no estimate yet")
    return gettext("in time at the current rate")


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
    checking: int  # questions with a check job (key audit, verification) not ended yet
    key_audited: int  # questions whose key the audit judged (for their current content)
    key_disputed: int  # ... and found disputed (a reviewer may have decided since)
    verified: int  # explained questions whose explanation the blind verifier checked
    verifier_flagged: int  # ... and flagged (verifier_disagrees, verifier_unsure)
    deadline: datetime | None
    started_at: datetime | None  # its first explanation job's first claim
    finished_at: datetime | None  # when its last explanation or check job ended, once done
    rate: eta.Rate | None  # what the estimate is based on
    eta_seconds: float | None  # None: done, or no rate yet
    now: datetime  # when it was measured

    @property
    def done(self) -> bool:
        """Nothing waits and nothing is checking: its counts are final."""
        return self.total > 0 and self.waiting == 0 and self.checking == 0

    @property
    def empty(self) -> bool:
        return self.total == 0  # never done (nothing to notice), and nothing waits

    @property
    def plain(self) -> int:
        """Explained, neither approved nor flagged (the admin's bar reads it by name)."""
        return self.explained - self.approved - self.flagged

    @property
    def finishes_at(self) -> datetime | None:
        """When it will be done at the current rate (None: done, or no rate)."""
        return None if self.eta_seconds is None else self.now + timedelta(seconds=self.eta_seconds)

    @property
    def late_by(self) -> timedelta | None:
        """How late it will be at the current rate (None: no deadline, no estimate, in time)."""
        finishes = self.finishes_at
        if self.deadline is None or finishes is None or finishes <= self.deadline:
            return None
        return finishes - self.deadline

    @property
    def overdue(self) -> timedelta | None:
        """How long ago its deadline passed, while it is not done and not empty."""
        if self.deadline is None or self.done or self.empty or self.deadline > self.now:
            return None
        return self.now - self.deadline

    @property
    def due_in(self) -> timedelta | None:
        return None if self.deadline is None else self.deadline - self.now  # negative: passed

    @property
    def stalled_near_deadline(self) -> bool:
        """Explanations wait with no estimate, ``DEADLINE_NEAR`` or less before the deadline."""
        due_in, unestimated = self.due_in, self.waiting > 0 and self.eta_seconds is None
        return unestimated and due_in is not None and due_in <= DEADLINE_NEAR

    @property
    def at_risk(self) -> bool:
        """Worth a warning: late, overdue, or near its deadline with no estimate."""
        return self.late_by is not None or self.overdue is not None or self.stalled_near_deadline

    def as_json(self) -> dict[str, object]:  # setstatus --json
        return {
            "name": self.name,
            "total": self.total,
            "completed": self.explained,
            "approved": self.approved,
            "flagged": self.flagged,
            "failed": self.failed,
            "waiting": self.waiting,
            "checking": self.checking,
            "key_audited": self.key_audited,
            "key_disputed": self.key_disputed,
            "verified": self.verified,
            "verifier_flagged": self.verifier_flagged,
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds),
            "eta_basis": self.rate.basis if self.rate is not None and not self.done else None,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "done": self.done,
            "empty": self.empty,
        }


def progress(question_set: StudyQuestionSet, now: datetime | None = None) -> Progress:
    now = now or timezone.now()
    members = questions(question_set)
    own = StudyQuestionJob.objects.filter(study_question=OuterRef("pk"))
    jobs = own.filter(kind=JobKind.EXPLANATION)
    explained = ~Q(explanation="")
    approved = explained & Q(current_revision__review_status__in=PROTECTED_REVIEWS)
    # A check job that will still run: processing, or pending with attempts left (paused or
    # not: a pause ends; a job out of attempts would hold the set forever).
    pending = Q(status=JobStatus.PENDING, attempts__lt=F("max_attempts"))
    checks = own.filter(Q(status=JobStatus.PROCESSING) | pending, kind__in=CHECK_KINDS)
    verifier_flagged = Q()
    for flag in VERIFIER_FLAGS:  # JSON text, quotes included (as ``QuestionQuerySet.flagged``)
        verifier_flagged |= Q(explanation_flags__icontains=f'"{flag}"')
    counts = members.annotate(
        active=Exists(jobs.filter(status__in=ACTIVE_STATUSES)),
        last=Subquery(jobs.order_by("-pk").values("status")[:1]),
        checks_running=Exists(checks),
    ).aggregate(
        total=Count("pk"),
        explained=Count("pk", filter=explained),
        approved=Count("pk", filter=approved),
        flagged=Count("pk", filter=explained & ~Q(explanation_flags=[]) & ~approved),
        # Not explained, its last explanation job failed or was skipped, and none is active.
        failed=Count("pk", filter=Q(explanation="", active=False, last__in=ENDED_UNEXPLAINED)),
        checking=Count("pk", filter=Q(checks_running=True)),
        key_audited=Count("pk", filter=~Q(key_audit="")),
        key_disputed=Count("pk", filter=Q(key_audit=KeyAudit.DISPUTED)),
        verified=Count("pk", filter=explained & Q(current_revision__verified_at__isnull=False)),
        verifier_flagged=Count("pk", filter=explained & verifier_flagged),
    )
    waiting = counts["total"] - counts["explained"] - counts["failed"]
    done = counts["total"] > 0 and not waiting and not counts["checking"]
    span = StudyQuestionJob.objects.filter(study_question__in=members.values("pk")).aggregate(
        started=Min("started_at", filter=Q(kind=JobKind.EXPLANATION)),
        # Done means its checks ended too: the last of them may end after every explanation.
        ended=Max("completed_at", filter=Q(kind__in=(JobKind.EXPLANATION, *CHECK_KINDS))),
    )
    rate = eta.rate_for(now, members.values("pk")) if waiting else None
    return Progress(
        **counts,  # the aggregate's names are the fields'
        name=question_set.name,
        waiting=waiting,
        deadline=question_set.deadline,
        started_at=span["started"],
        finished_at=span["ended"] if done else None,
        rate=rate,
        eta_seconds=rate.seconds_for(waiting) if rate is not None else None,
        now=now,
    )
