"""The queue's tables: jobs and their attempts, pauses, the consumers' records; status
changes only through ``queue.transitions``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue.models.base import (
    StudyQueueManager,
    StudyQueueModel,
    choice_width,
    endpoint_field,
    reply_figure,
)
from studyqueue.models.questions import StudyQuestion


class JobKind(models.TextChoices):
    """What a job does."""

    EXPLANATION = "explanation", _("Explanation")  # write the question's explanation
    # Summarise a learner's study session, once the explanations it draws on are written.
    SESSION_SUMMARY = "session_summary", _("Session summary")
    KEY_AUDIT = "key_audit", _("Key audit")  # ask the model for the answer alone, no key
    # Ask the model which choice an explanation supports, its answer line hidden, no key.
    VERIFICATION = "verification", _("Verification")
    # Ask the model, shown the key, which sentence of an explanation is the first wrong one.
    STEP_CHECK = "step_check", _("Step check")
    # Tell the world a question set is done: a Django signal, the webhook, an e-mail.
    SET_NOTICE = "set_notice", _("Set notice")
    # Tell the world a session's summary is written: a Django signal and the webhook.
    SESSION_NOTICE = "session_notice", _("Session notice")


# The kinds that check a question's key or its explanation (a set is done once they are).
CHECK_KINDS = (JobKind.KEY_AUDIT, JobKind.VERIFICATION, JobKind.STEP_CHECK)


@dataclass(frozen=True)
class KindSpec:
    """One job kind as the queue sees it, declared by the kind's own module beside its handler
    (``workers.registry.handler``): the claim, "when is the next job due" and "is a job
    ready" are assembled from the kinds' waits (``queue.sql``); enqueue reads the priority;
    the consumer runs a delivery beside the places it keeps for LLM calls."""

    kind: str
    handler: Callable[..., Awaitable[Any]]  # ``(job, ctx) -> JobResult`` (workers.registry)
    # SQL, a condition on ``job`` (the pending job's row; ``%(holds)s`` is KEY_AUDIT_HOLDS):
    # while it holds, the job is not claimed. The only form of the kind's wait.
    wait: str = ""
    # Jobs are claimed by priority, then deadline, turn and age: a higher number waits while
    # any lower one is ready.
    priority: int = 0
    delivery: bool = False  # no LLM call (a notice): runs beside the places kept for LLM jobs
    # A check of each new explanation: queued when one is stored while this setting is on.
    after_explanation: str = ""


KIND_SPECS: dict[str, KindSpec] = {}


def register_kind(spec: KindSpec) -> KindSpec:
    """Make ``spec`` its kind's (the last one registered wins: tests and benches swap one in)."""
    KIND_SPECS[spec.kind] = spec
    return spec


def kind_priority(kind: str) -> int:
    """The claim priority of ``kind``'s jobs (0 for a kind no module registered)."""
    spec = KIND_SPECS.get(kind)
    return spec.priority if spec is not None else 0


def delivery_kinds() -> frozenset[str]:
    """The kinds that make no LLM call."""
    return frozenset(kind for kind, spec in KIND_SPECS.items() if spec.delivery)


def checks_after_explanation() -> list[tuple[str, str]]:
    """Each kind queued after a stored explanation, with its setting, in ``JobKind``'s order."""
    specs = [KIND_SPECS[kind] for kind in JobKind if kind in KIND_SPECS]
    return [(spec.kind, spec.after_explanation) for spec in specs if spec.after_explanation]


def kind_waits() -> tuple[tuple[str, str], ...]:
    """Each kind that waits, with its wait, in a stable order (the claim is assembled from it)."""
    return tuple(sorted((kind, spec.wait) for kind, spec in KIND_SPECS.items() if spec.wait))


# The kinds whose jobs belong to a question (the others belong to a set or a session).
QUESTION_KINDS = (JobKind.EXPLANATION, JobKind.KEY_AUDIT, JobKind.VERIFICATION, JobKind.STEP_CHECK)


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
    SET_NOTICED = "set_noticed", _("This completion of the question set was noticed already")
    SESSION_MISSING = "session_missing", _("Study session no longer exists")
    EXPLANATIONS_NEEDED = "explanations_needed", _("Waits for explanations it draws on")
    INTERNAL = "internal", _("Unexpected internal error")


def error_code_field() -> models.CharField:
    """An error code column: a job's last, an attempt's own."""
    return models.CharField(
        verbose_name=_("error code"),
        max_length=choice_width(ErrorCode),
        choices=ErrorCode.choices,
        blank=True,
    )


def default_max_attempts() -> int:
    """The MAX_ATTEMPTS setting, read when a job is created."""
    from studyqueue.conf import conf

    return conf.MAX_ATTEMPTS


class JobQuerySet(models.QuerySet["StudyQuestionJob"]):
    """Reusable filters for the states the queue and the admin ask about."""

    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def stale(self, cutoff: datetime) -> JobQuerySet:
        """Processing jobs whose last heartbeat is older than ``cutoff``."""
        return self.filter(status=JobStatus.PROCESSING, heartbeat_at__lt=cutoff)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)


JobManager = StudyQueueManager.from_queryset(JobQuerySet)


class StudyQuestionJob(StudyQueueModel):
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
        verbose_name=_("kind"), max_length=choice_width(JobKind), choices=JobKind.choices
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
    # The study session a session's own job is about (its summary, its notice).
    study_session = models.ForeignKey(
        "StudySession",
        verbose_name=_("study session"),
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
    # Each enqueue numbers its jobs from the turn the queue is at (``enqueue.next_turn``):
    # within a priority and deadline, a batch queued later takes turns with the earlier ones.
    turn = models.BigIntegerField(verbose_name=_("turn"), default=0, db_default=0)
    status = models.CharField(
        verbose_name=_("status"),
        max_length=choice_width(JobStatus),
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
    llm_ms = reply_figure(_("LLM time (ms)"), help_text=_("LLM call time (ms)."))
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

    objects: ClassVar[JobManager] = JobManager()

    class Meta(StudyQueueModel.Meta):
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
            models.UniqueConstraint(
                fields=["study_session", "kind"],
                condition=Q(status__in=ACTIVE_STATUSES),
                name="studyqueue_job_one_active_per_session",
            ),
        ]
        indexes = [
            # Exactly the claim query: WHERE status='pending' ... ORDER BY priority, deadline,
            # turn, id (PostgreSQL sorts NULLs last in ascending order: no deadline last).
            models.Index(
                fields=["priority", "deadline", "turn", "id"],
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


class JobAttempt(StudyQueueModel):
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
    endpoint = endpoint_field(_("The server whose reply ended it (blank: no reply)."))
    prompt_tokens = reply_figure(_("prompt tokens"))
    completion_tokens = reply_figure(_("completion tokens"))
    first_token_ms = reply_figure(_("time to first token (ms)"))

    class Meta(StudyQueueModel.Meta):
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

    class Meta(StudyQueueModel.Meta):
        proxy = True
        verbose_name = _("queue dashboard")
        verbose_name_plural = _("queue dashboard")
        default_permissions = ()


class QueuePause(StudyQueueModel):
    """The queue paused for one kind, or for all (``kind`` blank); deleting it resumes.
    Running jobs finish; written only through ``queue.pauses``."""

    kind = models.CharField(
        verbose_name=_("kind"),
        max_length=choice_width(JobKind),
        choices=JobKind.choices,
        blank=True,
        unique=True,
        help_text=_("Blank: every kind."),
    )
    reason = models.CharField(verbose_name=_("reason"), max_length=500, blank=True)
    paused_by = models.CharField(verbose_name=_("paused by"), max_length=150, blank=True)
    paused_at = models.DateTimeField(verbose_name=_("paused at"), default=timezone.now)

    class Meta(StudyQueueModel.Meta):
        ordering = ["kind"]
        verbose_name = _("queue pause")
        verbose_name_plural = _("queue pauses")
        permissions = [("pause_queue", _("Can pause and resume the queue"))]

    def __str__(self) -> str:
        return gettext("paused: %(kinds)s") % {
            "kinds": self.get_kind_display() if self.kind else gettext("all kinds")
        }


class QueueConsumer(StudyQueueModel):
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
    breaker_open = models.BooleanField(verbose_name=_("breaker open"), default=False)
    breaker_since = models.DateTimeField(
        verbose_name=_("breaker open since"), null=True, blank=True
    )
    breaker_error = models.CharField(
        verbose_name=_("breaker error"), max_length=choice_width(ErrorCode), blank=True
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
    # settings of whichever shell or web server asks (they may differ).
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

    class Meta(StudyQueueModel.Meta):
        ordering = ["-seen_at"]
        verbose_name = _("consumer")
        verbose_name_plural = _("consumers")

    def __str__(self) -> str:
        return self.worker_id

    @property
    def paused_display(self) -> str:
        """The paused kinds for people: ``all`` for every kind."""
        return ", ".join(kind or "all" for kind in self.paused_kinds)
