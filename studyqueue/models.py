"""Study questions and the jobs that write their explanations, and the one rule for the
database they are on (``database()``, applied by every model's default manager,
``StudyQueueManager``)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Collection
from datetime import datetime
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models, router
from django.db.models import Exists, F, OuterRef, Q, Value
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


def database() -> str:
    """The database alias of every studyqueue query, reads included: the router's write
    alias for jobs (``default`` without a router). Operators and consumers must see what
    consumers wrote: a replica behind ``db_for_read`` would show a job pending that a
    consumer already claimed, or a pause that is already lifted.

    Queries get it from the models' managers (``StudyQueueManager``); code that needs the
    alias itself (a transaction, a connection) takes it from the queryset or instance it
    holds (``queryset.db``, ``instance._state.db``), and calls this only when it holds
    neither."""
    return router.db_for_write(StudyQuestionJob)


_M = TypeVar("_M", bound=models.Model)

# An LLM server's name (``services.endpoints.endpoint_name``), wherever it is stored.
ENDPOINT_WIDTH = 500


def _endpoint_field(help_text: Any) -> models.CharField[str, str]:
    """The server that wrote a reply (blank: unknown), on a revision or an attempt."""
    return models.CharField(
        verbose_name=_("LLM server"),
        max_length=ENDPOINT_WIDTH,
        blank=True,
        default="",
        db_default="",
        help_text=help_text,
    )


class StudyQueueManager(models.Manager[_M]):
    """The default manager of every studyqueue model: its querysets run on ``database()``,
    unless ``db_manager()`` or ``using()`` names another database. (Deferred fields and
    forward relations load through Django's base manager, not this one: the router decides
    those, with the instance as hint.)"""

    def get_queryset(self) -> models.QuerySet[_M]:
        queryset = super().get_queryset()
        if self._db is None:
            queryset = queryset.using(database())
        return queryset


class JobKind(models.TextChoices):
    """What a job does."""

    EXPLANATION = "explanation", _("Explanation")  # write the question's explanation
    SESSION_SUMMARY = "session_summary", _("Session summary")  # reserved; skipped when seen
    KEY_AUDIT = "key_audit", _("Key audit")  # ask the model for the answer alone, no key
    # Ask the model which choice an explanation supports, its answer line hidden, no key.
    VERIFICATION = "verification", _("Verification")
    # Tell the world a question set is done: a Django signal, the webhook, an e-mail.
    SET_NOTICE = "set_notice", _("Set notice")


# A job's claim priority by kind (0 when not listed): jobs are claimed by priority, then id,
# so a higher number waits while any lower one is ready. Checking an explanation never
# slows the writing of the next one.
KIND_PRIORITY: dict[str, int] = {JobKind.VERIFICATION: 1}


def kind_priority(kind: str) -> int:
    """The claim priority a new job of ``kind`` gets (``KIND_PRIORITY``)."""
    return KIND_PRIORITY.get(kind, 0)


class JobStatus(models.TextChoices):
    """Where a job is in its life."""

    PENDING = "pending", _("Pending")  # waiting to be claimed (maybe not before run_after)
    PROCESSING = "processing", _("Processing")  # claimed by a worker holding claim_token
    COMPLETED = "completed", _("Completed")  # done; the result is stored
    FAILED = "failed", _("Failed")  # gave up: a permanent error or attempts used up
    SKIPPED = "skipped", _("Skipped")  # deliberately not run (reserved kind, operator)


ACTIVE_STATUSES = (JobStatus.PENDING, JobStatus.PROCESSING)
FINISHED_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.SKIPPED)


class ErrorCode(models.TextChoices):
    """Why a job failed, was retried or was skipped."""

    LLM_UNAVAILABLE = "llm_unavailable", _("LLM server unreachable")
    LLM_TIMEOUT = "llm_timeout", _("LLM call timed out")
    LLM_OVERLOADED = "llm_overloaded", _("LLM server overloaded (429/503)")
    LLM_SERVER_ERROR = "llm_server_error", _("LLM server error (5xx)")
    LLM_REJECTED = "llm_rejected", _("LLM server rejected the request (4xx)")
    LLM_BAD_RESPONSE = "llm_bad_response", _("LLM reply could not be parsed")
    LLM_EMPTY = "llm_empty", _("LLM reply was empty")
    QUESTION_MISSING = "question_missing", _("Question no longer exists")
    QUESTION_EMPTY = "question_empty", _("Question has no text")
    QUESTION_INVALID = "question_invalid", _("Question data is invalid (choices)")
    QUESTION_CHANGED = "question_changed", _("Question changed during the LLM call")
    STALE = "stale", _("Worker stopped sending heartbeats")
    UNSUPPORTED_KIND = "unsupported_kind", _("Kind is reserved, not implemented")
    UNKNOWN_KIND = "unknown_kind", _("Kind is not known to this version")
    OPERATOR_SKIPPED = "operator_skipped", _("Skipped by an operator")
    NOTHING_TO_VERIFY = "nothing_to_verify", _("No explanation left to verify")
    WEBHOOK_FAILED = "webhook_failed", _("The webhook did not accept the notice")
    SET_MISSING = "set_missing", _("Question set no longer exists")
    SET_NOT_DONE = "set_not_done", _("The question set is no longer done")
    INTERNAL = "internal", _("Unexpected internal error")


def _choice_width(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)


def error_code_field() -> models.CharField:
    """An error code column: a job's last, an attempt's own."""
    return models.CharField(
        verbose_name=_("error code"),
        max_length=_choice_width(ErrorCode),
        choices=ErrorCode.choices,
        blank=True,
    )


def default_max_attempts() -> int:
    """The MAX_ATTEMPTS setting, read when a job is created."""
    from studyqueue.conf import conf

    return conf.MAX_ATTEMPTS


def validate_choices(value: object) -> None:
    """Choices are a list of strings (possibly empty); anything else is refused."""
    if not isinstance(value, list):
        raise ValidationError(
            "Choices must be a list of strings, not %(kind)s.",
            code="invalid_choices",
            params={"kind": type(value).__name__},
        )
    for number, choice in enumerate(value, start=1):
        if not isinstance(choice, str):
            raise ValidationError(
                "Choice %(number)s must be a string, not %(kind)s.",
                code="invalid_choices",
                params={"number": number, "kind": type(choice).__name__},
            )
        if not choice.strip():
            raise ValidationError(
                "Choice %(number)s is empty.", code="invalid_choices", params={"number": number}
            )


def _versions(version: str | Collection[str]) -> list[str]:
    return [version] if isinstance(version, str) else list(version)


# What a question's prompt is built from: a change of any voids the review of its
# explanation (``explanations.edits``).
CONTENT_FIELDS = frozenset({"text", "choices", "answer"})
# The quality flag (``quality.QualityFlag``) a question's explanation gets when that content
# changes after it was written: such an explanation is outdated whatever its prompt version.
QUESTION_CHANGED_FLAG = "question_changed"


class KeyAudit(models.TextChoices):
    """What the key audit found: the model, asked for the answer alone (never shown the key),
    against the key (``explanations.key_audit``). Blank: not audited (for this content)."""

    AGREES = "agrees", _("Agrees")  # a majority of the samples names the key
    DISPUTED = "disputed", _("Disputed")  # every sample names the same other choice
    UNSURE = "unsure", _("Unsure")  # anything else, or replies it could not read


class KeyCheck(models.TextChoices):
    """A reviewer's decision on a disputed key."""

    KEPT = "kept", _("Key kept")  # the key stands; the model was wrong
    CHANGED = "changed", _("Key changed")  # the model's choice became the key


class QuestionQuerySet(models.QuerySet["StudyQuestion"]):
    """Questions by the state of their explanation. A change of what a prompt is built
    from goes through ``explanations.edits.editing``, which says what it means for the
    question's explanations, reviews and key audit."""

    def explained(self) -> QuestionQuerySet:
        return self.exclude(explanation="")

    def missing(self) -> QuestionQuerySet:
        return self.filter(explanation="")

    def outdated(self, version: str | Collection[str]) -> QuestionQuerySet:
        """Explained by another prompt version than ``version`` (or than any of them), or
        for content the question no longer holds."""
        return self.explained().filter(~self._current_q(version))

    def current(self, version: str | Collection[str]) -> QuestionQuerySet:
        return self.explained().filter(self._current_q(version))

    @staticmethod
    def _current_q(version: str | Collection[str]) -> Q:
        changed = Q(explanation_flags__icontains=f'"{QUESTION_CHANGED_FLAG}"')
        return Q(explanation_prompt_version__in=_versions(version)) & ~changed

    def flagged(self, flag: str | None = None) -> QuestionQuerySet:
        """The current explanation carries a quality flag (``flag``, or any). Matched in the
        list's JSON text, quotes included (no flag's name is inside another's): JSON
        ``contains`` is PostgreSQL-only."""
        flagged = self.explained().exclude(explanation_flags=[])
        if flag is None:
            return flagged
        return flagged.filter(explanation_flags__icontains=f'"{flag}"')

    def needs_review(self) -> QuestionQuerySet:
        """A reviewer has a decision to make: the current explanation is unreviewed (every
        flagged one is, until someone decides), or a candidate waits to replace it."""
        waiting = ExplanationRevision.objects.filter(question=OuterRef("pk"), candidate=True)
        return self.explained().filter(
            Q(current_revision__isnull=True)
            | Q(current_revision__review_status=ReviewStatus.UNREVIEWED)
            | Exists(waiting)
        )

    def approved(self) -> QuestionQuerySet:
        """The current explanation was approved, or written by a reviewer."""
        return self.explained().filter(current_revision__review_status__in=PROTECTED_REVIEWS)


QuestionManager = StudyQueueManager.from_queryset(QuestionQuerySet)


class StudyQuestion(models.Model):
    """A question a learner studies; its explanation is written by the LLM."""

    text = models.TextField(
        verbose_name=_("text"), help_text=_("The question as shown to the learner.")
    )
    external_id = models.CharField(
        verbose_name=_("external id"),
        max_length=200,
        null=True,  # NULLs do not collide: only ids that are set are unique
        blank=True,
        unique=True,
        help_text=_("Your id for it (imports update the question with the same id)."),
    )
    choices = models.JSONField(
        verbose_name=_("choices"),
        default=list,
        blank=True,
        validators=[validate_choices],
        help_text=_("Answer options, if any: a list of strings."),
    )
    answer = models.TextField(
        verbose_name=_("answer"), blank=True, help_text=_("The correct answer, if known.")
    )
    explanation = models.TextField(
        verbose_name=_("explanation"), blank=True, help_text=_("The current revision's text.")
    )
    # The current revision's prompt version and flags, kept here for the admin's outdated and
    # needs-review filters (fast on a million questions without a join); every other fact of
    # the reply is read from the revision. Written only with current_revision.
    # Database defaults too: rows inserted by raw SQL or by older code get them.
    explanation_prompt_version = models.CharField(
        verbose_name=_("prompt version"),
        max_length=12,
        blank=True,
        default="",
        db_default="",
        db_index=True,
        help_text=_("The prompt version that wrote it."),
    )
    explanation_flags = models.JSONField(
        verbose_name=_("quality flags"),
        default=list,
        db_default=Value([], models.JSONField()),
        blank=True,
        help_text=_("Quality flags of the current explanation."),
    )
    current_revision = models.ForeignKey(
        "ExplanationRevision",
        verbose_name=_("current revision"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The revision shown as its explanation (its model, tokens, times)."),
    )
    # The key audit (``explanations.key_audit``): its verdict, the other choice every sample
    # named (1-based), what each sample answered, and the content it audited (a change of the
    # text, choices or key clears it, or, for a dispute that waits for a reviewer, only the
    # hash: the hold stands until a new audit or the reviewer settles it; ``edits``).
    key_audit = models.CharField(
        verbose_name=_("key audit"),
        max_length=_choice_width(KeyAudit),
        choices=KeyAudit.choices,
        blank=True,
        default="",
        db_default="",
        help_text=_("What the model, asked for the answer alone, said of the key."),
    )
    key_audit_answer = models.PositiveSmallIntegerField(
        verbose_name=_("model's choice"),
        null=True,
        blank=True,
        help_text=_("The choice (1-based) every sample named instead of the key."),
    )
    key_audit_samples = models.JSONField(
        verbose_name=_("key audit samples"),
        default=list,
        db_default=Value([], models.JSONField()),
        blank=True,
        help_text=_("What each sample answered (a choice number, or null: unread)."),
    )
    key_audit_hash = models.CharField(
        verbose_name=_("audited content"), max_length=64, blank=True, default="", db_default=""
    )
    key_check = models.CharField(
        verbose_name=_("key check"),
        max_length=_choice_width(KeyCheck),
        choices=KeyCheck.choices,
        blank=True,
        default="",
        db_default="",
        help_text=_("A reviewer's decision on a disputed key."),
    )
    key_check_by = models.CharField(
        verbose_name=_("key checked by"), max_length=150, blank=True, default="", db_default=""
    )
    key_check_at = models.DateTimeField(verbose_name=_("key checked at"), null=True, blank=True)
    created_at = models.DateTimeField(
        verbose_name=_("created"), default=timezone.now, editable=False
    )
    updated_at = models.DateTimeField(verbose_name=_("updated"), auto_now=True)

    objects = QuestionManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["id"]
        verbose_name = _("study question")
        verbose_name_plural = _("study questions")

    def __str__(self) -> str:
        if "text" in self.get_deferred_fields():
            return f"#{self.pk}"  # a list that deferred the text: do not load it for this
        excerpt = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"#{self.pk} {excerpt}"

    def checkable(self) -> bool:
        """It has text, choices and a key: what the key audit and the blind verifier need
        (each names a choice, and judges it against the key)."""
        return bool(self.text.strip() and self.choices and self.answer.strip())

    def content_hash(self) -> str:
        """A digest of what its prompt is built from (text, choices, answer): an explanation
        is stored only while the question still holds the content it was written for."""
        content = json.dumps([self.text, self.choices, self.answer], ensure_ascii=False)
        return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()

    def clean(self) -> None:
        # Also for an empty value: field validators skip None, which the column refuses.
        try:
            validate_choices(self.choices)
        except ValidationError as exc:
            raise ValidationError({"choices": exc.messages}) from None


def awaiting_key_check() -> Q:
    """A question whose key the audit disputed and no reviewer has kept or changed yet (the
    review queue's key check; with KEY_AUDIT_HOLDS, what holds its explanation)."""
    return Q(key_audit=KeyAudit.DISPUTED, key_check="")


def key_audit_holds() -> bool:
    """The KEY_AUDIT_HOLDS setting: a disputed key holds its explanation for a reviewer."""
    from studyqueue.conf import conf

    return bool(conf.KEY_AUDIT_HOLDS)


def waiting_for_key_audit() -> Q:
    """An explanation job waits (is not claimable) while its question's key audit runs
    first: an audit job of the question is processing, or pending with attempts left and
    its kind not paused; and, with KEY_AUDIT_HOLDS, while the question's key is disputed
    and no reviewer has kept or changed it. ``transitions.CLAIM_SQL`` is the same in SQL."""
    audit_pause = QueuePause.objects.filter(kind=JobKind.KEY_AUDIT)
    audit = StudyQuestionJob.objects.filter(
        study_question_id=OuterRef("study_question_id"), kind=JobKind.KEY_AUDIT
    ).filter(
        Q(status=JobStatus.PROCESSING)
        | (Q(status=JobStatus.PENDING, attempts__lt=F("max_attempts")) & ~Exists(audit_pause))
    )
    waits = Q(Exists(audit))
    if key_audit_holds():
        held = StudyQuestion.objects.filter(awaiting_key_check(), pk=OuterRef("study_question_id"))
        waits |= Q(Exists(held))
    return Q(kind=JobKind.EXPLANATION) & waits


class JobQuerySet(models.QuerySet["StudyQuestionJob"]):
    """Reusable filters for the states the queue and the admin ask about."""

    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def claimable(self) -> JobQuerySet:
        """Pending jobs with attempts left, of a kind that is not paused: claimable now or
        once their ``run_after`` is due."""
        paused = QueuePause.objects.filter(Q(kind="") | Q(kind=OuterRef("kind")))
        claimable = self.pending().filter(attempts__lt=F("max_attempts")).exclude(Exists(paused))
        return claimable.exclude(waiting_for_key_audit())

    def ready(self, now: datetime) -> JobQuerySet:
        """Claimable jobs that are due at ``now`` (exactly what ``queue.claim`` takes)."""
        return self.claimable().filter(run_after__lte=now)

    def processing(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PROCESSING)

    def stale(self, cutoff: datetime) -> JobQuerySet:
        """Processing jobs whose last heartbeat is older than ``cutoff``."""
        return self.processing().filter(heartbeat_at__lt=cutoff)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)


JobManager = StudyQueueManager.from_queryset(JobQuerySet)


class StudyQuestionJob(models.Model):
    """One unit of work on a question; status changes only through ``queue.transitions``."""

    study_question = models.ForeignKey(
        StudyQuestion,
        verbose_name=_("question"),
        # Keep the job (and its history) when a question is deleted; the worker then
        # fails it as question_missing instead of the row silently vanishing.
        on_delete=models.SET_NULL,
        null=True,
        related_name="jobs",
    )
    kind = models.CharField(
        verbose_name=_("kind"), max_length=_choice_width(JobKind), choices=JobKind.choices
    )
    # The question set a set's own job is about (a set notice); null for a question's jobs.
    question_set = models.ForeignKey(
        "StudyQuestionSet",
        verbose_name=_("question set"),
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="jobs",
    )
    priority = models.PositiveSmallIntegerField(
        verbose_name=_("priority"),
        default=0,
        db_default=0,
        help_text=_("Claimed before any job with a higher number that is ready (0: first)."),
    )
    deadline = models.DateTimeField(
        verbose_name=_("deadline"),
        null=True,
        blank=True,
        help_text=_(
            "The earliest deadline of its question's sets: within a priority, jobs with one are "
            "claimed first, earliest first, then by age."
        ),
    )
    status = models.CharField(
        verbose_name=_("status"),
        max_length=_choice_width(JobStatus),
        choices=JobStatus.choices,
        default=JobStatus.PENDING,
    )
    attempts = models.PositiveIntegerField(verbose_name=_("attempts"), default=0)
    max_attempts = models.PositiveIntegerField(
        verbose_name=_("max attempts"), default=default_max_attempts
    )
    free_releases = models.PositiveSmallIntegerField(
        verbose_name=_("free releases"),
        default=0,
        db_default=0,  # rows inserted by older code or raw SQL get it too
        help_text=_(
            "Times in a row the job was handed back without counting its attempt "
            "after its call reached the LLM server (bounded: every job ends)."
        ),
    )
    error_code = error_code_field()
    error_message = models.TextField(verbose_name=_("error message"), blank=True)
    created_at = models.DateTimeField(verbose_name=_("created"), default=timezone.now)
    run_after = models.DateTimeField(
        verbose_name=_("run after"), default=timezone.now, help_text=_("Not claimed before this.")
    )
    started_at = models.DateTimeField(verbose_name=_("started"), null=True, blank=True)
    heartbeat_at = models.DateTimeField(verbose_name=_("last heartbeat"), null=True, blank=True)
    completed_at = models.DateTimeField(verbose_name=_("completed"), null=True, blank=True)
    claim_token = models.UUIDField(
        verbose_name=_("claim token"),
        null=True,
        blank=True,
        help_text=_("Fences writes to one claim."),
    )
    worker_id = models.CharField(verbose_name=_("worker"), max_length=200, blank=True)
    # The job's own LLM time (its completing call), beside what it ran with; everything
    # about the reply itself (model, tokens, timings, prompt, finish) is on its revision.
    llm_ms = models.PositiveIntegerField(
        verbose_name=_("LLM time (ms)"), null=True, blank=True, help_text=_("LLM call time (ms).")
    )
    revision = models.ForeignKey(
        "ExplanationRevision",
        verbose_name=_("revision"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_(
            "The explanation it wrote (its model, server, tokens, timings, prompt version); "
            "for a verification job, the explanation it checked."
        ),
    )
    max_tokens = models.PositiveIntegerField(
        verbose_name=_("max tokens"),
        null=True,
        blank=True,
        help_text=_("max_tokens for its calls (blank: LLM_MAX_TOKENS)."),
    )
    quality_retried = models.BooleanField(
        verbose_name=_("retried for quality"),
        default=False,
        db_default=False,
        help_text=_("Already retried once for a quality flag."),
    )

    objects = JobManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["-id"]
        verbose_name = _("study question job")
        verbose_name_plural = _("study question jobs")
        permissions = [
            ("retry_studyquestionjob", _("Can retry failed or skipped jobs")),
            ("skip_studyquestionjob", _("Can skip pending or processing jobs")),
            ("reset_stale_studyquestionjob", _("Can reset stale jobs")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="studyqueue_job_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=JobKind.values), name="studyqueue_job_kind_valid"
            ),
            models.UniqueConstraint(
                fields=["study_question", "kind"],
                condition=Q(status__in=ACTIVE_STATUSES),
                name="studyqueue_job_one_active",
                violation_error_message=_("This question already has an active job of this kind."),
            ),
            models.UniqueConstraint(
                fields=["question_set", "kind"],
                condition=Q(status__in=ACTIVE_STATUSES),
                name="studyqueue_job_one_active_per_set",
                violation_error_message=_("This set already has an active job of this kind."),
            ),
        ]
        indexes = [
            # Exactly the claim query: WHERE status='pending' ... ORDER BY priority, deadline,
            # id (PostgreSQL sorts NULLs last in ascending order: jobs with no deadline last).
            models.Index(
                fields=["priority", "deadline", "id"],
                condition=Q(status=JobStatus.PENDING),
                name="studyqueue_job_claim",
            ),
            # The stale scan: WHERE status='processing' AND heartbeat_at < cutoff.
            models.Index(
                fields=["heartbeat_at"],
                condition=Q(status=JobStatus.PROCESSING),
                name="studyqueue_job_stale",
            ),
            # The admin's status filter, newest first.
            models.Index(fields=["status", "-id"], name="studyqueue_job_status_id"),
            # The dashboard's last-24-hours figures.
            models.Index(
                fields=["completed_at"],
                condition=Q(completed_at__isnull=False),
                name="studyqueue_job_completed",
            ),
        ]

    def __str__(self) -> str:
        return gettext("job %(id)s (%(kind)s, %(status)s)") % {
            "id": self.pk,
            "kind": self.get_kind_display(),
            "status": self.get_status_display(),
        }


class Outcome(models.TextChoices):
    """What became of a claimed job: what a fenced transition did, and how the attempt ended
    (an attempt's ``outcome``: blank while it runs; never ``lost``)."""

    COMPLETED = "completed", _("Completed")  # the reply was stored
    RETRYING = "retrying", _("Retrying")  # failed, or its reply was flagged: the job runs again
    FAILED = "failed", _("Failed")  # failed, and the job with it
    RELEASED = "released", _("Handed back")  # not counted: server down, consumer stopping, pause
    SKIPPED = "skipped", _("Skipped")  # not run (reserved or unknown kind), or by an operator
    STALE = "stale", _("Stale")  # no heartbeat: presumed dead, reset or failed by the stale scan
    # The claim was taken from the worker (stale reset, operator): it wrote nothing, and the
    # attempt was ended by whoever took it.
    LOST = "lost", _("Lost")


# How an attempt can end, as stored (``JobAttempt.outcome``): every outcome but ``lost``.
ATTEMPT_OUTCOMES = tuple(outcome for outcome in Outcome if outcome is not Outcome.LOST)


class JobAttempt(models.Model):
    """One claim of a job, from the claim to how it ended: the job's history, pruned with it.
    Written only by ``studyqueue.queue.transitions``, in the statements and transactions of its
    transitions."""

    job = models.ForeignKey(
        StudyQuestionJob,
        verbose_name=_("job"),
        on_delete=models.CASCADE,
        related_name="attempt_log",
        db_index=False,  # the (job, number) constraint's index serves it
    )
    number = models.PositiveIntegerField(
        verbose_name=_("attempt"),
        help_text=_("1, 2, … over the job's whole life, an operator's retries included."),
    )
    started_at = models.DateTimeField(verbose_name=_("started"))
    ended_at = models.DateTimeField(verbose_name=_("ended"), null=True, blank=True)
    worker_id = models.CharField(verbose_name=_("worker"), max_length=200, blank=True)
    outcome = models.CharField(
        verbose_name=_("outcome"),
        max_length=max(len(outcome.value) for outcome in ATTEMPT_OUTCOMES),
        choices=[(outcome.value, outcome.label) for outcome in ATTEMPT_OUTCOMES],
        blank=True,
    )
    error_code = error_code_field()
    error_message = models.TextField(verbose_name=_("error message"), blank=True)
    endpoint = _endpoint_field(_("The server whose reply ended it (blank: no reply)."))
    prompt_tokens = models.PositiveIntegerField(
        verbose_name=_("prompt tokens"), null=True, blank=True
    )
    completion_tokens = models.PositiveIntegerField(
        verbose_name=_("completion tokens"), null=True, blank=True
    )
    first_token_ms = models.PositiveIntegerField(
        verbose_name=_("time to first token (ms)"), null=True, blank=True
    )

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["job", "number"]
        verbose_name = _("job attempt")
        verbose_name_plural = _("job attempts")
        default_permissions = ()  # shown on its job's page, never edited
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="studyqueue_attempt_number"),
            # The one a fenced transition closes; also the index of "its open attempt".
            models.UniqueConstraint(
                fields=["job"],
                condition=Q(ended_at__isnull=True),
                name="studyqueue_attempt_one_open",
            ),
            models.CheckConstraint(
                condition=Q(outcome__in=["", *(outcome.value for outcome in ATTEMPT_OUTCOMES)]),
                name="studyqueue_attempt_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return gettext("attempt %(number)s of job %(job)s") % {
            "number": self.number,
            "job": self.job_id,
        }


class QueueDashboard(StudyQuestionJob):
    """The admin's queue dashboard (a proxy so that it appears in the app's admin index)."""

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        proxy = True
        verbose_name = _("queue dashboard")
        verbose_name_plural = _("queue dashboard")
        default_permissions = ()


class QueuePause(models.Model):
    """The queue paused for one kind, or for all (``kind`` blank); deleting it resumes.

    Consumers claim nothing of a paused kind (the claim itself checks this table); running
    jobs finish and enqueueing goes on. Written only through ``queue.pause``/``resume``.
    """

    kind = models.CharField(
        verbose_name=_("kind"),
        max_length=_choice_width(JobKind),
        choices=JobKind.choices,
        blank=True,
        unique=True,
        help_text=_("Blank: every kind."),
    )
    reason = models.CharField(verbose_name=_("reason"), max_length=500, blank=True)
    paused_by = models.CharField(verbose_name=_("paused by"), max_length=150, blank=True)
    paused_at = models.DateTimeField(verbose_name=_("paused at"), default=timezone.now)

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["kind"]
        verbose_name = _("queue pause")
        verbose_name_plural = _("queue pauses")
        permissions = [("pause_queue", _("Can pause and resume the queue"))]

    def __str__(self) -> str:
        return gettext("paused: %(kinds)s") % {
            "kinds": self.get_kind_display() if self.kind else gettext("all kinds")
        }


class QueueConsumer(models.Model):
    """A consumer process as it last reported itself (start, every cycle, stop)."""

    worker_id = models.CharField(verbose_name=_("worker"), max_length=200, unique=True)
    host = models.CharField(verbose_name=_("host"), max_length=255)
    pid = models.PositiveIntegerField(verbose_name=_("pid"))
    started_at = models.DateTimeField(verbose_name=_("started"))
    seen_at = models.DateTimeField(
        verbose_name=_("last report"), help_text=_("Last report: start, each cycle, stop.")
    )
    stopped_at = models.DateTimeField(verbose_name=_("stopped"), null=True, blank=True)
    interval_seconds = models.FloatField(verbose_name=_("interval (s)"))
    jobs_completed = models.PositiveIntegerField(
        verbose_name=_("jobs completed"), default=0, help_text=_("Since it started.")
    )
    jobs_running = models.PositiveIntegerField(verbose_name=_("jobs running"), default=0)
    breaker_open = models.BooleanField(verbose_name=_("breaker open"), default=False)
    breaker_since = models.DateTimeField(
        verbose_name=_("breaker open since"), null=True, blank=True
    )
    breaker_error = models.CharField(
        verbose_name=_("breaker error"), max_length=_choice_width(ErrorCode), blank=True
    )
    llm_url = models.CharField(
        verbose_name=_("LLM server"),
        max_length=500,
        help_text=_("Credentials redacted; several servers are separated by commas."),
    )
    gate_permits = models.CharField(
        _("gate permits"),
        max_length=10,
        blank=True,
        help_text=_("GATE_PERMITS as it started: a number, or auto (see GateLimit)."),
    )
    gate_limit = models.PositiveIntegerField(
        _("gate limit"),
        null=True,
        blank=True,
        help_text=_("Concurrent LLM calls its gate allowed at its last report."),
    )
    model = models.CharField(
        _("model"), max_length=200, blank=True, help_text=_("LLM_MODEL ('': the server's default).")
    )
    # What "outdated" is measured against: the version the running consumers write, not the
    # settings of whichever shell or web server asks (they may differ: item 4).
    prompt_version = models.CharField(_("prompt version"), max_length=12, blank=True)
    prompt_label = models.CharField(_("prompt label"), max_length=200, blank=True)
    paused_kinds = models.JSONField(
        verbose_name=_("paused kinds"),
        default=list,
        blank=True,
        help_text=_("The kinds paused at its last report, as QueuePause.kind ('': every kind)."),
    )
    endpoints = models.JSONField(
        verbose_name=_("LLM servers"),
        default=list,
        blank=True,
        help_text=_(
            "Each LLM server as it saw it at its last report: name, model, state (up, "
            "probing, down), limit, calls held, tokens/s, error."
        ),
    )

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["-seen_at"]
        verbose_name = _("consumer")
        verbose_name_plural = _("consumers")

    def __str__(self) -> str:
        return self.worker_id

    @property
    def paused_display(self) -> str:
        """The paused kinds for people: ``all`` for every kind."""
        return ", ".join(kind or "all" for kind in self.paused_kinds)


class FinishReason(models.TextChoices):
    """Why the LLM stopped writing, as the server says it (``finish_reason``). A server may
    send another word; it is kept as it is (cleaned, at most ``FINISH_REASON_WIDTH``)."""

    STOP = "stop", _("Stop")  # the model finished its answer
    LENGTH = "length", _("Length")  # cut at max_tokens: the text may end mid-sentence
    CONTENT_FILTER = "content_filter", _("Content filter")
    TOOL_CALLS = "tool_calls", _("Tool calls")
    NONE = "", _("None given")  # the reply ended without saying why


FINISH_REASON_WIDTH = 20


class ReviewStatus(models.TextChoices):
    """What a reviewer decided about a revision (one decision each, with who and when)."""

    UNREVIEWED = "unreviewed", _("unreviewed")  # nobody has judged it yet
    APPROVED = "approved", _("approved")  # fit to publish as it is
    REJECTED = "rejected", _("rejected")  # wrong: a regeneration was queued
    EDITED = "edited", _("edited")  # corrected by a reviewer (or the correction itself)


# A current explanation in these states is never replaced silently: a regeneration becomes a
# candidate revision that a reviewer accepts or rejects.
PROTECTED_REVIEWS = (ReviewStatus.APPROVED, ReviewStatus.EDITED)


class ExplanationRevision(models.Model):
    """One generated explanation of a question, kept for good; the question points at its
    current one. Written only through ``studyqueue.explanations.revisions``."""

    question = models.ForeignKey(
        StudyQuestion,
        verbose_name=_("question"),
        on_delete=models.CASCADE,
        related_name="revisions",
    )
    job = models.ForeignKey(
        StudyQuestionJob,
        verbose_name=_("job"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    text = models.TextField(verbose_name=_("text"))
    model = models.CharField(verbose_name=_("model"), max_length=200, blank=True)
    endpoint = _endpoint_field(
        _(
            "The server that wrote it, as its normalised URL (blank: written before "
            "servers were recorded, or by a reviewer)."
        )
    )
    prompt_version = models.CharField(verbose_name=_("prompt version"), max_length=12, blank=True)
    prompt_label = models.CharField(verbose_name=_("prompt label"), max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(
        verbose_name=_("prompt tokens"), null=True, blank=True
    )
    cached_tokens = models.PositiveIntegerField(
        verbose_name=_("cached tokens"),
        null=True,
        blank=True,
        help_text=_("Prompt tokens the server served from its cache (blank: it did not say)."),
    )
    completion_tokens = models.PositiveIntegerField(
        verbose_name=_("completion tokens"), null=True, blank=True
    )
    first_token_ms = models.PositiveIntegerField(
        verbose_name=_("time to first token (ms)"), null=True, blank=True
    )
    tokens_per_second = models.FloatField(
        verbose_name=_("tokens per second"),
        null=True,
        blank=True,
        help_text=_(
            "Decode rate: tokens after the first over the time from the first to the last "
            "(blank: fewer than two tokens or under 50 ms)."
        ),
    )
    finish_reason = models.CharField(
        verbose_name=_("finish reason"),
        max_length=FINISH_REASON_WIDTH,
        blank=True,
        help_text=_("As the server said it (stop, length…)."),
    )
    flags = models.JSONField(verbose_name=_("quality flags"), default=list, blank=True)
    stated_answer = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",  # rows written before 0013, or by raw SQL: none read
        verbose_name=_("stated answer"),
        help_text=_(
            "The answer the reply states, as written (blank: none could be read, or it was "
            "written before answers were read)."
        ),
    )
    created_at = models.DateTimeField(verbose_name=_("created"), default=timezone.now)

    author = models.CharField(
        verbose_name=_("author"),
        max_length=150,
        blank=True,
        default="",
        db_default="",
        help_text=_("Who wrote it: blank for the LLM, else the reviewer who corrected it."),
    )
    based_on = models.ForeignKey(
        "self",
        verbose_name=_("based on"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The revision a reviewer corrected into this one."),
    )
    candidate = models.BooleanField(
        verbose_name=_("candidate"),
        default=False,
        db_default=False,
        help_text=_(
            "Written for a question whose explanation was approved or edited: it becomes "
            "current only when a reviewer accepts it."
        ),
    )
    review_status = models.CharField(
        verbose_name=_("review status"),
        max_length=_choice_width(ReviewStatus),
        choices=ReviewStatus.choices,
        default=ReviewStatus.UNREVIEWED,
        db_default=ReviewStatus.UNREVIEWED,
    )
    reviewed_by = models.CharField(
        verbose_name=_("reviewed by"), max_length=150, blank=True, default="", db_default=""
    )
    reviewed_at = models.DateTimeField(verbose_name=_("reviewed at"), null=True, blank=True)
    verifier_answer = models.PositiveSmallIntegerField(
        verbose_name=_("verifier's choice"),
        null=True,
        blank=True,
        help_text=_(
            "The choice (1-based) the blind verifier says the explanation supports (blank: "
            "it named none, or several, or it has not checked yet)."
        ),
    )
    verifier_reply = models.CharField(
        verbose_name=_("verifier's reply"), max_length=200, blank=True, default="", db_default=""
    )
    verified_at = models.DateTimeField(
        verbose_name=_("verified at"),
        null=True,
        blank=True,
        help_text=_("When the blind verifier checked it (blank: not checked)."),
    )

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["-id"]
        verbose_name = _("explanation revision")
        verbose_name_plural = _("explanation revisions")
        permissions = [
            ("restore_explanationrevision", _("Can make an older revision current")),
            ("review_explanation", _("Can review explanations (approve, reject, edit)")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(review_status__in=ReviewStatus.values),
                name="studyqueue_revision_review_status_valid",
            ),
        ]
        indexes = [
            # The review queue's "a candidate waits for this question" (few rows).
            models.Index(
                fields=["question"],
                condition=Q(candidate=True),
                name="studyqueue_revision_candidate",
            ),
        ]

    def __str__(self) -> str:
        return gettext("revision %(id)s of question %(question)s") % {
            "id": self.pk,
            "question": self.question_id,
        }

    @property
    def truncated(self) -> bool:
        """The LLM stopped at max_tokens: the text may be cut."""
        return self.finish_reason == FinishReason.LENGTH

    @property
    def protected(self) -> bool:
        """Approved or written by a reviewer: a regeneration must not replace it silently."""
        return self.review_status in PROTECTED_REVIEWS


def revision_to_verify(question: StudyQuestion) -> ExplanationRevision | None:
    """The revision a verification job of ``question`` checks (``explanations.verifier``):
    its newest generated one not yet verified that is its current explanation (not outdated:
    written for content that is gone, nothing to check it against) or a waiting candidate."""
    shown = Q(pk=question.current_revision_id)
    if question.current_revision_id is None or QUESTION_CHANGED_FLAG in (
        question.explanation_flags or []
    ):
        shown = Q(pk__in=[])
    return (
        ExplanationRevision.objects.filter(question_id=question.pk, author="", verified_at=None)
        .filter(shown | Q(candidate=True))
        .order_by("-pk")
        .first()
    )


class ExplanationReview(ExplanationRevision):
    """The admin's review page (a proxy so that it appears in the app's admin index)."""

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        proxy = True
        verbose_name = _("explanation review")
        verbose_name_plural = _("explanation reviews")
        default_permissions = ()


class GateLimit(models.Model):
    """The adaptive gate's limit for one LLM endpoint (``GATE_PERMITS=auto``): shared by
    every consumer of that endpoint, kept across restarts. Written only through
    ``studyqueue.services.gate_limits``."""

    endpoint = models.CharField(
        _("endpoint"),
        max_length=ENDPOINT_WIDTH,
        unique=True,
        help_text=_(
            "The LLM server's URL, normalised: one row per server however its URL is "
            "written, never with credentials."
        ),
    )
    limit = models.PositiveIntegerField(_("limit"), help_text=_("Concurrent calls allowed now."))
    rates = models.JSONField(
        _("tokens/s by limit"),
        default=dict,
        blank=True,
        help_text=_("Completion tokens/s last measured at each limit, as {limit: tokens/s}."),
    )
    reason = models.CharField(_("reason"), max_length=20, blank=True)
    changed_at = models.DateTimeField(_("changed at"), default=timezone.now)

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["endpoint"]
        verbose_name = _("gate limit")
        verbose_name_plural = _("gate limits")

    def __str__(self) -> str:
        return f"{self.endpoint}: {self.limit}"

    def measured(self) -> list[tuple[int, float]]:
        """``(limit, tokens/s)`` pairs in the order of the limit."""
        if not isinstance(self.rates, dict):
            return []  # a hand edit or a bad restore (a list, a number): nothing measured
        pairs = []
        for key, value in self.rates.items():
            try:
                pair = (int(key), float(value))
            except (TypeError, ValueError, OverflowError):
                continue  # hand-edited garbage: not shown
            if math.isfinite(pair[1]):
                pairs.append(pair)
        return sorted(pairs)


# --------------------------------------------------------------------------- columns
# What a column can hold, stated once from the fields: the widest primary key, a text
# field's width (never written again as a number), text without the characters no column
# can store.

MAX_ID = 2**63 - 1  # a bigint primary key (every studyqueue id)
_SURROGATE = re.compile("[\ud800-\udfff]")
# What no text column can hold: NUL (PostgreSQL refuses it) and lone surrogates (not UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class StudyQuestionSet(models.Model):
    """A named batch of questions, as a teacher thinks of them ("the 2026 midterm"): a
    question may belong to several. Its progress is its questions' explanations
    (``explanations.question_sets``)."""

    name = models.CharField(_("name"), max_length=200, unique=True)
    questions = models.ManyToManyField(
        StudyQuestion, verbose_name=_("questions"), related_name="sets", blank=True
    )
    deadline = models.DateTimeField(
        _("deadline"), null=True, blank=True, help_text=_("When it is needed by (optional).")
    )
    owner_email = models.EmailField(
        _("owner's e-mail"),
        blank=True,
        default="",
        db_default="",
        help_text=_("Told by e-mail when the set is done (optional)."),
    )
    # The end of the last job of the completion last noticed: a later completion (questions
    # added and explained since) is noticed again; this one never twice.
    noticed_through = models.DateTimeField(_("noticed through"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), default=timezone.now)

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["-created_at", "name"]
        verbose_name = _("question set")
        verbose_name_plural = _("question sets")

    def __str__(self) -> str:
        return self.name


class GateLease(models.Model):
    """One gate slot of one LLM server, held as a row lease: how every consumer of the server
    shares its limit, on any database and through any pooler. Written only through
    ``services.gate`` (``SlotLeases``), on the database's clock: a slot is taken by the update
    that finds it free or expired, renewed while held, and freed by its holder (a consumer's
    worker id); a dead holder's lease expires."""

    endpoint = models.CharField(_("endpoint"), max_length=ENDPOINT_WIDTH)
    slot = models.PositiveSmallIntegerField(_("slot"))
    holder = models.CharField(
        _("holder"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("The consumer holding it ('': free)."),
    )
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)

    objects = StudyQueueManager()

    class Meta:
        # Related and deferred loads on the same database alias as every query.
        base_manager_name = "objects"
        ordering = ["endpoint", "slot"]
        verbose_name = _("gate lease")
        verbose_name_plural = _("gate leases")
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "slot"], name="studyqueue_gate_lease_slot")
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} #{self.slot}: {self.holder or '-'}"


def width(model: type[models.Model], field_name: str) -> int:
    """The ``max_length`` of ``model.field_name``."""
    field = model._meta.get_field(field_name)
    max_length = getattr(field, "max_length", None)
    if not isinstance(max_length, int):
        raise TypeError(f"{model.__name__}.{field_name} has no max_length")
    return max_length


def fit(model: type[models.Model], field_name: str, text: str) -> str:
    """``text`` cut to the width of ``model.field_name``."""
    return text[: width(model, field_name)]


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character no database column can store (a form refuses
    it; ``storable`` cleans a reply)."""
    return _UNSTORABLE.search(text) is not None


def storable(text: str) -> str:
    """``text`` as every text column can store it: without NUL (PostgreSQL refuses it), and
    valid Unicode: surrogate halves that arrived apart (JSON ``\\ud83d`` then ``\\ude00``)
    joined, a lone one replaced by U+FFFD (no database encodes it)."""
    text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
