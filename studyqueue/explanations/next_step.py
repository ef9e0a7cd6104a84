"""What a question needs next, queued: the one rule every entry point calls before a
question's explanation is written (``enqueue``, ``importquestions --enqueue``, the admin's
actions, the review queue's regeneration) or after its content changed (``edits``).

An explanation is preceded by the key audit (``KEY_AUDIT``) while its key has not been
audited for the question's content: both are queued in one transaction, and the claim holds
the explanation while the audit is active, or while a disputed key waits for a reviewer
(``KEY_AUDIT_HOLDS``). So no consumer explains a key that was never checked."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from studyqueue.conf import conf
from studyqueue.explanations import key_audit
from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob, awaiting_key_check
from studyqueue.queue.enqueue import enqueue_many


@dataclass(frozen=True)
class Queued:
    """What a call queued: ``created`` jobs of the kind asked for, of ``requested``
    questions (the others had an active one), and the key audits queued to run first."""

    requested: int
    created: int
    audits: int = 0

    @property
    def already(self) -> int:
        """Questions that had an active job of the kind already."""
        return self.requested - self.created


def queue_jobs(question_ids: Iterable[int], kind: str = JobKind.EXPLANATION) -> Queued:
    """Queue a job of ``kind`` for each question (idempotent: an active one is kept); for an
    explanation, the key audit first where the question's key has not been audited for its
    content. Ids of questions that do not exist are left alone."""
    ids = sorted({int(pk) for pk in question_ids})
    with transaction.atomic(using=StudyQuestionJob.objects.all().db):
        audits = _queue_audits(ids) if kind == JobKind.EXPLANATION else 0
        created = enqueue_many(ids, kind)
    return Queued(requested=len(ids), created=created, audits=audits)


def audit_waiting(question_ids: Iterable[int]) -> int:
    """Of these questions, those whose explanation waits (an active explanation job, or a
    disputed key held for a reviewer) get their key audited first where it was not audited
    for their content (after an edit: ``edits``; ``enqueue --missing``). How many audit jobs
    were queued."""
    explanation = StudyQuestionJob.objects.active().filter(
        kind=JobKind.EXPLANATION, study_question_id=OuterRef("pk")
    )
    waiting = StudyQuestion.objects.filter(pk__in=sorted(set(question_ids))).filter(
        Q(Exists(explanation)) | awaiting_key_check()
    )
    return _queue_audits(waiting.values_list("pk", flat=True))


def _queue_audits(ids: Iterable[int]) -> int:
    if not conf.KEY_AUDIT:
        return 0
    needed = key_audit.needing_audit_ids(ids)
    return enqueue_many(needed, JobKind.KEY_AUDIT) if needed else 0
