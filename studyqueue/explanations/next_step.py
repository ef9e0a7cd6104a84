"""What a question needs next, queued: the one rule every entry point calls before a question's
explanation is written, or after its content changed. The key audit comes first while the key
has not been audited for the question's content, so no consumer explains an unchecked key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from studyqueue.explanations import key_audit
from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob, awaiting_key_check
from studyqueue.queue.enqueue import enqueue_many


@dataclass(frozen=True)
class Queued:
    """What a call queued: ``created`` jobs for ``requested`` questions, and key audits."""

    requested: int
    created: int
    audits: int = 0

    @property
    def already(self) -> int:
        """Questions that had an active job of the kind already."""
        return self.requested - self.created


def queue_jobs(question_ids: Iterable[int], kind: str = JobKind.EXPLANATION) -> Queued:
    """Queue a job of ``kind`` for each existing question (idempotent); for an explanation,
    the key audit first where the key was not audited for the question's content."""
    ids = sorted({int(pk) for pk in question_ids})
    with transaction.atomic(using=StudyQuestionJob.objects.all().db):
        audits = key_audit.queue_audits(ids) if kind == JobKind.EXPLANATION else 0
        created = enqueue_many(ids, kind)
    return Queued(requested=len(ids), created=created, audits=audits)


def audit_waiting(question_ids: Iterable[int]) -> int:
    """Queue the key audits a waiting explanation of these questions needs; how many."""
    explanation = StudyQuestionJob.objects.active().filter(
        kind=JobKind.EXPLANATION, study_question_id=OuterRef("pk")
    )
    waiting = StudyQuestion.objects.filter(pk__in=sorted(set(question_ids))).filter(
        Q(Exists(explanation)) | awaiting_key_check()
    )
    return key_audit.queue_audits(waiting.values_list("pk", flat=True))
