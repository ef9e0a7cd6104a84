"""A set's completion notice: exactly one per completion, as a ``set_notice`` job
(``workers.set_notice``) queued by the consumers' sweep (``queue_due_notices``): the
``set_completed`` signal, a webhook POST signed with ``WEBHOOK_SECRET`` carrying the
completion's ``Idempotency-Key``, and an e-mail to the set's owner."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.dispatch import Signal
from django.utils.translation import gettext

from studyqueue import times
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob, StudyQuestionSet
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue_for_set
from studyqueue.queue.store import Fenced
from studyqueue.sets.question_sets import Progress, checks_line, counts_line, progress, questions

logger = logging.getLogger("studyqueue.sets")

ALREADY_NOTICED = "this completion of the set was noticed already"

# Sent once per completion of a set (``Noticed.write``), after the commit that records it:
# ``sender`` is ``StudyQuestionSet``; ``question_set`` the set; ``payload`` the webhook's body
# as a dict (the same JSON, whether a webhook is set or not).
set_completed = Signal()

SIGNATURE_HEADER = "X-Studyqueue-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"


# What the notice's JSON carries of ``Progress.as_json``: the counts, its checks' included.
PAYLOAD_KEYS = (
    "total", "completed", "failed", "flagged", "finished_at", "key_audited", "key_disputed",
    "verified", "verifier_flagged",
)  # fmt: skip


def payload(progress: Progress) -> dict[str, object]:
    """The notice's JSON: what the set came to (``setstatus --json``'s counts)."""
    counts = progress.as_json()
    return {
        "event": "set.completed",
        "set": progress.name,
        **{key: counts[key] for key in PAYLOAD_KEYS},
    }


def body_of(data: dict[str, object]) -> bytes:
    """The exact bytes sent and signed (compact, keys sorted, UTF-8)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signature(body: bytes, secret: str) -> str:
    """``sha256=<hex HMAC-SHA256 of the body with the secret>``: the receiver recomputes it
    (``hmac.compare_digest``) to know the notice is ours and unaltered."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def completion_key(question_set: StudyQuestionSet) -> str:
    """What identifies a completion of ``question_set``: its membership, however often its
    explanations are regenerated (a set that grew and is done again is a new completion).
    Sent as the notice's idempotency key: every delivery of one completion (a retry, a second
    consumer) carries the same, so a receiver keeps the first."""
    ids = ",".join(
        str(pk) for pk in questions(question_set).order_by("pk").values_list("pk", flat=True)
    )
    digest = hashlib.sha256(ids.encode()).hexdigest()[:32]
    return f"set-{question_set.pk}-{digest}"


def queue_due_notices() -> int:
    """Queue the notice of every done set whose completion has none yet; how many were queued.
    One completion gets one notice job, even one that fails for good. Cheap when nothing
    happened: only sets with an explanation job ended since ``noticed_through`` are read."""
    last_end = (
        StudyQuestionJob.objects.filter(
            study_question__sets=OuterRef("pk"),
            kind=JobKind.EXPLANATION,
            completed_at__isnull=False,
        )
        .order_by("-completed_at")
        .values("completed_at")[:1]
    )
    candidates = StudyQuestionSet.objects.annotate(last_end=Subquery(last_end)).filter(
        Q(noticed_through__isnull=True) | Q(last_end__gt=F("noticed_through")),
        last_end__isnull=False,
    )
    now = ((question_set, progress(question_set)) for question_set in candidates)
    return sum(_queue_notice(question_set, done) for question_set, done in now if done.done)


def _queue_notice(question_set: StudyQuestionSet, done: Progress) -> int:
    """Queue the notice of this completion of ``question_set`` unless one was (1, else 0).
    A compare-and-set on ``notice_queued_for``: of two consumers' sweeps, one queues it."""
    key = completion_key(question_set)
    sets = StudyQuestionSet.objects.filter(pk=question_set.pk)
    with transaction.atomic(using=sets.db):
        if key == question_set.notice_queued_for:
            # Its notice job ended (or runs), or a regeneration ended in a set done with the
            # same questions: look at the set again only after a later job.
            sets.update(noticed_through=done.finished_at)
            return 0
        claimed = sets.filter(notice_queued_for=question_set.notice_queued_for).update(
            notice_queued_for=key
        )
        if not claimed:
            return 0  # another consumer's sweep queued it
        created = enqueue_for_set(question_set.pk, JobKind.SET_NOTICE).created
        if not created:
            # An earlier completion's notice is active and may have read its own already: leave
            # this one unqueued, for the sweep after that notice ended (its end is a job's).
            transaction.set_rollback(True, using=sets.db)
        return int(created)


@dataclass(frozen=True)
class NotDone(Fenced):
    """The notice's set is no longer done: the job is skipped and its completion released, for
    the sweep to queue a notice when the set is done again (only work ending can do that, so
    this cannot loop by itself)."""

    question_set: StudyQuestionSet
    key: str
    code: str
    message: str

    def writes(self, job: StudyQuestionJob) -> transitions.Outcome:
        outcome = transitions.skip_claimed(job, self.code, self.message)
        if outcome is transitions.Outcome.SKIPPED:
            StudyQuestionSet.objects.filter(
                pk=self.question_set.pk, notice_queued_for=self.key
            ).update(notice_queued_for="", noticed_through=None)
        return outcome


@dataclass(frozen=True)
class Noticed(Fenced):
    """A set's notice went out (or had nowhere to go): the job completes and the set records
    the completion, in one transaction; the signal and the owner's e-mail go after the commit.
    The record is a compare-and-set on ``noticed_key``: a notice job that finds the completion
    recorded is skipped, so they go exactly once whatever the consumers race."""

    question_set: StudyQuestionSet
    progress: Progress
    data: dict[str, object]
    key: str

    def writes(self, job: StudyQuestionJob) -> transitions.Outcome:
        # The UPDATE takes the set's row lock: a second writer waits for this commit, then
        # matches no row.
        recorded = (
            StudyQuestionSet.objects.filter(pk=self.question_set.pk)
            .exclude(noticed_key=self.key)
            .update(
                noticed_key=self.key,
                notice_queued_for=self.key,  # what it found: the sweep queues no other
                noticed_through=self.progress.finished_at,
            )
        )
        if not recorded:
            return transitions.skip_claimed(job, ErrorCode.SET_NOTICED, ALREADY_NOTICED)
        outcome = transitions.complete(job)
        if outcome is transitions.Outcome.COMPLETED:
            transaction.on_commit(self._announce, using=job._state.db)
        return outcome

    def _announce(self) -> None:
        set_completed.send_robust(
            sender=StudyQuestionSet, question_set=self.question_set, payload=self.data
        )
        owner, done = self.question_set.owner_email, self.progress
        if not owner:
            return
        try:
            finished = gettext("Finished %(at)s.") % {"at": times.shown(done.finished_at)}
            lines = [counts_line(done), checks_line(done), finished]
            send_mail(
                gettext("%(name)s is done") % {"name": done.name},
                "\n".join(line for line in lines if line is not None),
                None,
                [owner],
            )
        except Exception as exc:  # a mail server down is the owner's loss, not the queue's
            logger.warning(
                "study_set_mail_failed set=%s error=%s", self.question_set.pk, type(exc).__name__
            )
