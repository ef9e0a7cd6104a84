"""Queueing jobs: one (``enqueue``, idempotent), many in one statement (``enqueue_many``),
a set's notice; a job's deadline from its question's sets. What a question needs next is
``explanations.next_step``'s to say; this module only inserts."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import Min, OuterRef, Subquery
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.exceptions import EnqueueError
from studyqueue.models import (
    QUESTION_KINDS,
    JobKind,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
    kind_priority,
)
from studyqueue.queue import notify, sql
from studyqueue.queue.operations import batches
from studyqueue.queue.sql import db_value
from studyqueue.queue.transitions import log_job, validate_kind

logger = logging.getLogger("studyqueue.queue")


@dataclass(frozen=True)
class EnqueueResult:
    """The active job for a (question, kind) and whether this call created it."""

    job: StudyQuestionJob
    created: bool


def _question_kind(kind: str) -> None:
    if validate_kind(kind) not in QUESTION_KINDS:
        raise EnqueueError(
            f"{kind} jobs belong to a question set or a study session, not to a question"
        )


def enqueue(question: StudyQuestion | int, kind: str = JobKind.EXPLANATION) -> EnqueueResult:
    """Queue a job for ``question``; idempotent: returns the active job if there is one."""
    _question_kind(kind)
    question_id = question.pk if isinstance(question, StudyQuestion) else int(question)
    if not StudyQuestion.objects.filter(pk=question_id).exists():
        raise EnqueueError(f"study question {question_id} does not exist")
    return _insert_active({"study_question_id": question_id}, kind, f"question {question_id}")


def enqueue_for_set(set_id: int, kind: str) -> EnqueueResult:
    """Queue a job of ``kind`` (its notice) for question set ``set_id``; idempotent: returns
    the active one if there is one."""
    return _insert_active({"question_set_id": set_id}, kind, f"set {set_id}")


def enqueue_for_session(session_id: int, kind: str) -> EnqueueResult:
    """Queue a job of ``kind`` (its summary, its notice) for study session ``session_id``;
    idempotent: returns the active one if there is one."""
    return _insert_active({"study_session_id": session_id}, kind, f"session {session_id}")


def _earliest_deadline() -> Subquery:
    """The earliest deadline among the sets of the job's question (``OuterRef``)."""
    sets = StudyQuestionSet.objects.filter(
        questions=OuterRef("study_question_id"), deadline__isnull=False
    )
    return Subquery(sets.order_by("deadline").values("deadline")[:1])


def _deadline_of(question_id: int | None) -> datetime | None:
    """The earliest deadline among the sets of question ``question_id``."""
    if question_id is None:
        return None
    sets = StudyQuestionSet.objects.filter(questions=question_id, deadline__isnull=False)
    return sets.aggregate(first=Min("deadline"))["first"]


def set_deadlines(question_ids: Iterable[int]) -> int:
    """Give the active jobs of these questions the earliest deadline of their sets again; how
    many jobs."""
    jobs = StudyQuestionJob.objects.all()
    changed = 0
    for chunk in batches(sorted({int(i) for i in question_ids}), jobs.db):
        active = jobs.active().filter(study_question_id__in=chunk)
        changed += active.update(deadline=_earliest_deadline())
    return changed


def next_turn() -> int:
    """The turn the queue is at: the next ready job's (0 when none is). A batch queued now
    numbers its jobs from there, so that it takes turns with the jobs queued before it
    instead of waiting behind all of them."""
    ready = StudyQuestionJob.objects.pending().filter(run_after__lte=timezone.now())
    head = ready.order_by("priority", "deadline", "turn", "id").values_list("turn", flat=True)
    return head.first() or 0


def _insert_active(owner: dict[str, int], kind: str, named: str) -> EnqueueResult:
    """Insert an active job of ``kind`` for ``owner`` (its question or its set), or return
    the active one there is."""
    jobs = StudyQuestionJob.objects.all()
    now = timezone.now()
    # The partial unique constraint is the arbiter: try to insert, and on a conflict
    # return the job that won. Loop because that job may finish in between.
    for _ in range(5):
        try:
            with transaction.atomic(using=jobs.db):
                job = jobs.create(
                    **owner,
                    kind=kind,
                    priority=kind_priority(kind),
                    deadline=_deadline_of(owner.get("study_question_id")),
                    turn=next_turn(),
                    created_at=now,
                    run_after=now,
                )
        except IntegrityError:
            existing = jobs.active().filter(**owner, kind=kind).first()
            if existing is not None:
                return EnqueueResult(existing, created=False)
            continue
        log_job("enqueued", job)
        notify.send(notify.wake(), using=jobs.db)
        return EnqueueResult(job, created=True)
    raise EnqueueError(f"could not enqueue {named}: conflicting writes kept winning")


# Bulk enqueue as INSERT … SELECT from the question table: ids of missing questions match
# no row, the partial unique constraint skips questions that have an active job, and the
# database builds the rows. PostgreSQL takes the ids as one array parameter.
ENQUEUE_MANY_SQL = """
INSERT INTO studyqueue_studyquestionjob
    (study_question_id, kind, priority, deadline, turn, status, attempts, max_attempts,
     free_releases, error_code, error_message, created_at, run_after, worker_id)
SELECT id, %(kind)s, %(priority)s,
    (SELECT MIN(qset.deadline) FROM studyqueue_studyquestionset AS qset
     JOIN studyqueue_studyquestionset_questions AS member
       ON member.studyquestionset_id = qset.id
     WHERE member.studyquestion_id = studyqueue_studyquestion.id),
    %(turn)s + ROW_NUMBER() OVER (ORDER BY id),
    'pending', 0, %(max_attempts)s, 0, '', '', %(now)s, %(now)s, ''
FROM studyqueue_studyquestion
WHERE {ids}
ON CONFLICT DO NOTHING
"""


def enqueue_many(question_ids: Iterable[int], kind: str = JobKind.EXPLANATION) -> int:
    """Queue jobs for many questions in bulk (those with an active job, and missing ids, left
    alone); how many were created."""
    _question_kind(kind)
    db = StudyQuestionJob.objects.all().db  # the raw SQL runs where the job queryset would
    ids = sorted({int(i) for i in question_ids})
    params: dict[str, Any] = {
        "kind": kind,
        "priority": kind_priority(kind),
        "max_attempts": conf.MAX_ATTEMPTS,
        "now": db_value(StudyQuestionJob, "created_at", timezone.now(), db),
        "turn": next_turn(),
    }
    postgres = sql.postgres(db)
    batch = 50_000 if postgres else 500  # SQLite: stay under its bound-parameter limit
    created = 0
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        chunk_params: dict[str, Any]
        if postgres:
            where, chunk_params = "id = ANY(%(ids)s)", {"ids": chunk}
        else:
            names = [f"id{i}" for i in range(len(chunk))]
            where = f"id IN ({', '.join(f'%({n})s' for n in names)})"
            chunk_params = dict(zip(names, chunk, strict=True))
        with connections[db].cursor() as cursor:
            chunk_params["turn"] = params["turn"] + start
            cursor.execute(ENQUEUE_MANY_SQL.format(ids=where), {**params, **chunk_params})
            created += cursor.rowcount
    logger.info("study_jobs_enqueued kind=%s requested=%s created=%s", kind, len(ids), created)
    if created:
        notify.send(notify.wake(), using=db)
    return created
