"""Study questions and the jobs that write their explanations."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, F, OuterRef, Q, Value
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class JobKind(models.TextChoices):
    """What a job does."""

    EXPLANATION = "explanation", "Explanation"  # write the question's explanation
    SESSION_SUMMARY = "session_summary", "Session summary"  # reserved; skipped when seen


class JobStatus(models.TextChoices):
    """Where a job is in its life."""

    PENDING = "pending", "Pending"  # waiting to be claimed (maybe not before run_after)
    PROCESSING = "processing", "Processing"  # claimed by a worker holding claim_token
    COMPLETED = "completed", "Completed"  # done; the result is stored
    FAILED = "failed", "Failed"  # gave up: a permanent error or attempts used up
    SKIPPED = "skipped", "Skipped"  # deliberately not run (reserved kind, operator)


ACTIVE_STATUSES = (JobStatus.PENDING, JobStatus.PROCESSING)
FINISHED_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.SKIPPED)


class ErrorCode(models.TextChoices):
    """Why a job failed, was retried or was skipped."""

    LLM_UNAVAILABLE = "llm_unavailable", "LLM server unreachable"
    LLM_TIMEOUT = "llm_timeout", "LLM call timed out"
    LLM_OVERLOADED = "llm_overloaded", "LLM server overloaded (429/503)"
    LLM_SERVER_ERROR = "llm_server_error", "LLM server error (5xx)"
    LLM_REJECTED = "llm_rejected", "LLM server rejected the request (4xx)"
    LLM_BAD_RESPONSE = "llm_bad_response", "LLM reply could not be parsed"
    LLM_EMPTY = "llm_empty", "LLM reply was empty"
    QUESTION_MISSING = "question_missing", "Question no longer exists"
    QUESTION_EMPTY = "question_empty", "Question has no text"
    QUESTION_INVALID = "question_invalid", "Question data is invalid (choices)"
    QUESTION_CHANGED = "question_changed", "Question changed during the LLM call"
    STALE = "stale", "Worker stopped sending heartbeats"
    UNSUPPORTED_KIND = "unsupported_kind", "Kind is reserved, not implemented"
    UNKNOWN_KIND = "unknown_kind", "Kind is not known to this version"
    OPERATOR_SKIPPED = "operator_skipped", "Skipped by an operator"
    INTERNAL = "internal", "Unexpected internal error"


def _choice_width(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)


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


class QuestionQuerySet(models.QuerySet["StudyQuestion"]):
    """Questions by the state of their explanation."""

    def explained(self) -> QuestionQuerySet:
        return self.exclude(explanation="")

    def missing(self) -> QuestionQuerySet:
        return self.filter(explanation="")

    def outdated(self, version: str) -> QuestionQuerySet:
        """Explained by another prompt version than ``version`` (today's)."""
        return self.explained().exclude(explanation_prompt_version=version)

    def current(self, version: str) -> QuestionQuerySet:
        return self.explained().filter(explanation_prompt_version=version)

    def needs_review(self) -> QuestionQuerySet:
        """The current explanation carries a quality flag."""
        return self.explained().exclude(explanation_flags=[])


class StudyQuestion(models.Model):
    """A question a learner studies; its explanation is written by the LLM."""

    text = models.TextField(help_text="The question as shown to the learner.")
    external_id = models.CharField(
        max_length=200,
        null=True,  # NULLs do not collide: only ids that are set are unique
        blank=True,
        unique=True,
        help_text="Your id for it (imports update the question with the same id).",
    )
    choices = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_choices],
        help_text="Answer options, if any: a list of strings.",
    )
    answer = models.TextField(blank=True, help_text="The correct answer, if known.")
    explanation = models.TextField(blank=True, help_text="The current revision's text.")
    # The current revision's prompt version and flags, kept here for the admin's outdated and
    # needs-review filters (fast on a million questions without a join); every other fact of
    # the reply is read from the revision. Written only with current_revision.
    # Database defaults too: rows inserted by raw SQL or by older code get them.
    explanation_prompt_version = models.CharField(
        max_length=12,
        blank=True,
        default="",
        db_default="",
        db_index=True,
        help_text="The prompt version that wrote it.",
    )
    explanation_flags = models.JSONField(
        default=list,
        db_default=Value([], models.JSONField()),
        blank=True,
        help_text="Quality flags of the current explanation.",
    )
    current_revision = models.ForeignKey(
        "ExplanationRevision",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The revision shown as its explanation (its model, tokens, times).",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuestionQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        if "text" in self.get_deferred_fields():
            return f"#{self.pk}"  # a list that deferred the text: do not load it for this
        excerpt = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"#{self.pk} {excerpt}"

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
        return self.pending().filter(attempts__lt=F("max_attempts")).exclude(Exists(paused))

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


class StudyQuestionJob(models.Model):
    """One unit of work on a question; status changes only through ``studyqueue.queue``."""

    study_question = models.ForeignKey(
        StudyQuestion,
        # Keep the job (and its history) when a question is deleted; the worker then
        # fails it as question_missing instead of the row silently vanishing.
        on_delete=models.SET_NULL,
        null=True,
        related_name="jobs",
    )
    kind = models.CharField(max_length=_choice_width(JobKind), choices=JobKind.choices)
    status = models.CharField(
        max_length=_choice_width(JobStatus), choices=JobStatus.choices, default=JobStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=default_max_attempts)
    free_releases = models.PositiveSmallIntegerField(
        default=0,
        db_default=0,  # rows inserted by older code or raw SQL get it too
        help_text="Times in a row the job was handed back without counting its attempt "
        "after its call reached the LLM server (bounded: every job ends).",
    )
    error_code = models.CharField(
        max_length=_choice_width(ErrorCode), choices=ErrorCode.choices, blank=True
    )
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    run_after = models.DateTimeField(default=timezone.now, help_text="Not claimed before this.")
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True, help_text="Fences writes to one claim.")
    worker_id = models.CharField(max_length=200, blank=True)
    # The job's own LLM time (its completing call), beside what it ran with; everything
    # about the reply itself (model, tokens, timings, prompt, finish) is on its revision.
    llm_ms = models.PositiveIntegerField(null=True, blank=True, help_text="LLM call time (ms).")
    revision = models.ForeignKey(
        "ExplanationRevision",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The reply that completed it: model, tokens, timings, prompt version.",
    )
    max_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="max_tokens for its calls (blank: LLM_MAX_TOKENS)."
    )
    quality_retried = models.BooleanField(
        default=False, db_default=False, help_text="Already retried once for a quality flag."
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        permissions = [
            ("retry_studyquestionjob", "Can retry failed or skipped jobs"),
            ("skip_studyquestionjob", "Can skip pending or processing jobs"),
            ("reset_stale_studyquestionjob", "Can reset stale jobs"),
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
                violation_error_message="This question already has an active job of this kind.",
            ),
        ]
        indexes = [
            # Exactly the claim query: WHERE status='pending' ... ORDER BY id.
            models.Index(
                fields=["id"], condition=Q(status=JobStatus.PENDING), name="studyqueue_job_claim"
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
        return f"job {self.pk} ({self.kind}, {self.status})"


class QueueDashboard(StudyQuestionJob):
    """The admin's queue dashboard (a proxy so that it appears in the app's admin index)."""

    class Meta:
        proxy = True
        verbose_name = "queue dashboard"
        verbose_name_plural = "queue dashboard"
        default_permissions = ()


class QueuePause(models.Model):
    """The queue paused for one kind, or for all (``kind`` blank); deleting it resumes.

    Consumers claim nothing of a paused kind (the claim itself checks this table); running
    jobs finish and enqueueing goes on. Written only through ``queue.pause``/``resume``.
    """

    kind = models.CharField(
        max_length=_choice_width(JobKind),
        choices=JobKind.choices,
        blank=True,
        unique=True,
        help_text="Blank: every kind.",
    )
    reason = models.CharField(max_length=500, blank=True)
    paused_by = models.CharField(max_length=150, blank=True)
    paused_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind"]
        verbose_name = "queue pause"
        permissions = [("pause_queue", "Can pause and resume the queue")]

    def __str__(self) -> str:
        return f"paused: {self.kind or 'all kinds'}"


class QueueConsumer(models.Model):
    """A consumer process as it last reported itself (start, every cycle, stop)."""

    worker_id = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="Last report: start, each cycle, stop.")
    stopped_at = models.DateTimeField(null=True, blank=True)
    interval_seconds = models.FloatField()
    jobs_completed = models.PositiveIntegerField(default=0, help_text="Since it started.")
    jobs_running = models.PositiveIntegerField(default=0)
    breaker_open = models.BooleanField(default=False)
    breaker_since = models.DateTimeField(null=True, blank=True)
    breaker_error = models.CharField(max_length=_choice_width(ErrorCode), blank=True)
    llm_url = models.CharField(max_length=500, help_text="Credentials redacted.")
    gate_permits = models.CharField(
        _("gate permits"),
        max_length=10,
        blank=True,
        help_text=_("GATE_PERMITS as it started: a number, or auto (see GateLimit)."),
    )
    paused_kinds = models.JSONField(
        default=list,
        blank=True,
        help_text="The kinds paused at its last report, as QueuePause.kind ('': every kind).",
    )

    class Meta:
        ordering = ["-seen_at"]
        verbose_name = "consumer"

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


class ExplanationRevision(models.Model):
    """One generated explanation of a question, kept for good; the question points at its
    current one. Written only through ``studyqueue.revisions``."""

    question = models.ForeignKey(StudyQuestion, on_delete=models.CASCADE, related_name="revisions")
    job = models.ForeignKey(
        StudyQuestionJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    text = models.TextField()
    model = models.CharField(max_length=200, blank=True)
    prompt_version = models.CharField(max_length=12, blank=True)
    prompt_label = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Prompt tokens the server served from its cache (blank: it did not say)."),
    )
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_second = models.FloatField(
        null=True,
        blank=True,
        help_text=_(
            "Decode rate: tokens after the first over the time from the first to the last "
            "(blank: fewer than two tokens or under 50 ms)."
        ),
    )
    finish_reason = models.CharField(
        max_length=FINISH_REASON_WIDTH,
        blank=True,
        help_text="As the server said it (stop, length…).",
    )
    flags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        verbose_name = "explanation revision"
        permissions = [("restore_explanationrevision", "Can make an older revision current")]

    def __str__(self) -> str:
        return f"revision {self.pk} of question {self.question_id}"

    @property
    def truncated(self) -> bool:
        """The LLM stopped at max_tokens: the text may be cut."""
        return self.finish_reason == FinishReason.LENGTH


class GateLimit(models.Model):
    """The adaptive gate's limit for one LLM endpoint (``GATE_PERMITS=auto``): shared by
    every consumer of that endpoint, kept across restarts. Written only through
    ``studyqueue.gate_limits``."""

    endpoint = models.CharField(
        _("endpoint"), max_length=500, unique=True, help_text=_("Credentials redacted.")
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

    class Meta:
        ordering = ["endpoint"]
        verbose_name = _("gate limit")

    def __str__(self) -> str:
        return f"{self.endpoint}: {self.limit}"

    def measured(self) -> list[tuple[int, float]]:
        """``(limit, tokens/s)`` pairs in the order of the limit."""
        pairs = []
        for key, value in self.rates.items():
            try:
                pairs.append((int(key), float(value)))
            except (TypeError, ValueError):
                continue  # hand-edited garbage: not shown
        return sorted(pairs)
