"""The operator's admin: jobs, questions and the queue dashboard.

State changes happen only through actions that call ``studyqueue.queue`` (the same
functions as the commands and the consumer); every field of a job is read-only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Left
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.functional import cached_property
from django.utils.html import format_html

from studyqueue import dashboard, queue
from studyqueue.conf import conf
from studyqueue.forms import StudyQuestionForm
from studyqueue.models import (
    JobKind,
    JobQuerySet,
    JobStatus,
    QueueDashboard,
    StudyQuestion,
    StudyQuestionJob,
)

# Badge colours per status; a test checks that every status has one.
STATUS_COLOURS: dict[str, str] = {
    JobStatus.PENDING: "#64748b",
    JobStatus.PROCESSING: "#2563eb",
    JobStatus.COMPLETED: "#16a34a",
    JobStatus.FAILED: "#dc2626",
    JobStatus.SKIPPED: "#d97706",
}

EXCERPT = 60
# A long text shows this much in a scroll box; the rest is behind a link. A reply may be
# megabytes (up to LLM_MAX_REPLY_BYTES): a page never renders it whole.
LONG_TEXT_SHOWN = 20_000
# Search terms that are job ids: a bigint.
MAX_ID = 2**63 - 1


def excerpt(text: str, length: int = EXCERPT) -> str:
    text = " ".join(text[: length * 4].split())
    return text if len(text) <= length else text[: length - 1] + "…"


def long_text(text: str, full_text_url: str | None = None) -> str:
    """``text`` in a scroll box, capped at ``LONG_TEXT_SHOWN`` characters (escaped)."""
    if not text:
        return "-"
    shown = text[:LONG_TEXT_SHOWN]
    box = format_html(
        '<div class="sq-long" style="max-height:24em;max-width:60em;overflow:auto;'
        'white-space:pre-wrap">{}</div>',
        shown,
    )
    more = len(text) - len(shown)
    if more and full_text_url:
        box += format_html(
            '<p>{} more characters not shown: <a href="{}">the full text</a>.</p>',
            number_format(more, force_grouping=True),
            full_text_url,
        )
    return box


def short_duration(delta: timedelta) -> str:
    seconds = int(max(delta.total_seconds(), 0))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d"


def status_badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#6b7280")
    return format_html(
        '<span class="sq-badge" style="background:{}">{}</span>',
        colour,
        JobStatus(status).label if status in JobStatus.values else status,
    )


class CappedCountPaginator(Paginator):
    """Counts at most ``CAP`` rows, so a page view never counts a huge table."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if isinstance(qs, QuerySet):
            return qs.order_by().values("pk")[: self.CAP].count()
        return len(qs)

    @property
    def capped(self) -> bool:
        return self.count >= self.CAP


class StaleFilter(admin.SimpleListFilter):
    """Processing jobs whose heartbeat is older than the stale threshold."""

    title = "stale"
    parameter_name = "stale"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", f"No heartbeat for {conf.STALE_MINUTES:g} min")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "yes":
            cutoff = timezone.now() - timedelta(minutes=conf.STALE_MINUTES)
            return cast(JobQuerySet, queryset).stale(cutoff)  # the jobs' own QuerySet
        return None


# --------------------------------------------------------------------------- jobs


@admin.register(StudyQuestionJob)
class StudyQuestionJobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "question_link",
        "kind",
        "status_badge",
        "attempts_display",
        "error_code",
        "age",
        "started_at",
        "completed_at",
        "llm_time",
    )
    list_display_links = ("id",)
    list_filter = (
        "status",
        "kind",
        "error_code",
        StaleFilter,
        ("created_at", admin.DateFieldListFilter),
    )
    list_select_related = ("study_question",)
    list_per_page = 50
    search_fields = ("study_question__text", "error_message")
    search_help_text = "Question text or error message; a number finds that job id."
    show_full_result_count = False
    paginator = CappedCountPaginator
    ordering = ("-id",)
    actions = ("retry_jobs", "skip_jobs", "reset_stale_jobs")
    change_list_template = "admin/studyqueue/studyquestionjob/change_list.html"
    fieldsets = (
        (None, {"fields": ("question_link", "kind", "status_badge", "worker_id")}),
        (
            "Attempts",
            {
                "fields": (
                    "attempts",
                    "max_attempts",
                    "free_releases",
                    "error_code",
                    "error_message_box",
                    "run_after",
                )
            },
        ),
        (
            "Times",
            {"fields": ("created_at", "started_at", "heartbeat_at", "completed_at", "claim_token")},
        ),
        (
            "LLM",
            {
                "fields": (
                    "llm_model",
                    "llm_prompt_tokens",
                    "llm_completion_tokens",
                    "llm_time",
                    "explanation",
                )
            },
        ),
    )

    # -- read-only everywhere: state changes only through actions

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for fieldset in self.fieldsets for name in fieldset[1]["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are created by enqueueing

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.retry_studyquestionjob")

    def has_skip_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.skip_studyquestionjob")

    def has_reset_stale_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.reset_stale_studyquestionjob")

    # -- columns

    @admin.display(description="question", ordering="study_question")
    def question_link(self, job: StudyQuestionJob) -> str:
        if job.study_question_id is None:
            return "(deleted)"
        url = reverse("admin:studyqueue_studyquestion_change", args=[job.study_question_id])
        text = getattr(job, "question_start", None) or ""
        return format_html('<a href="{}">#{}</a> {}', url, job.study_question_id, excerpt(text))

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: StudyQuestionJob) -> str:
        return status_badge(job.status)

    @admin.display(description="attempts")
    def attempts_display(self, job: StudyQuestionJob) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description="waiting / running")
    def age(self, job: StudyQuestionJob) -> str:
        now = timezone.now()
        if job.status == JobStatus.PENDING:
            return f"waiting {short_duration(now - job.created_at)}"
        if job.status == JobStatus.PROCESSING and job.started_at:
            return f"running {short_duration(now - job.started_at)}"
        if job.started_at and job.completed_at:
            return f"took {short_duration(job.completed_at - job.started_at)}"
        return "-"

    @admin.display(description="LLM time", ordering="llm_ms")
    def llm_time(self, job: StudyQuestionJob) -> str:
        if job.llm_ms is None:
            return "-"
        return f"{job.llm_ms / 1000:.1f}s" if job.llm_ms >= 1000 else f"{job.llm_ms} ms"

    @admin.display(description="explanation")
    def explanation(self, job: StudyQuestionJob) -> str:
        question = job.study_question
        if question is None:
            return "-"
        url = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
        return long_text(question.explanation, url)

    @admin.display(description="error message")
    def error_message_box(self, job: StudyQuestionJob) -> str:
        return long_text(job.error_message)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # The list shows an excerpt of each question: its long columns stay in the database.
        return (
            super()
            .get_queryset(request)
            .defer(
                "error_message",
                "study_question__text",
                "study_question__explanation",
                "study_question__choices",
                "study_question__answer",
            )
            .annotate(question_start=Left("study_question__text", EXCERPT * 4))
        )

    # -- search: a number is a job id (fast, exact); anything else searches text

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip().lstrip("#")
        # ASCII digits only: "²".isdigit() is true too, and int("²") fails.
        if term.isascii() and term.isdigit() and int(term) <= MAX_ID:
            return queryset.filter(pk=int(term)), False
        return super().get_search_results(request, queryset, search_term)

    # -- actions

    def _log_each(self, request: HttpRequest, ids: list[int], message: str) -> None:
        for job in StudyQuestionJob.objects.filter(pk__in=ids):
            self.log_change(request, job, message)

    @admin.action(permissions=["retry"], description="Retry selected failed or skipped jobs")
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = queue.retry(queryset.values_list("pk", flat=True))
        self._log_each(request, result.retried, "Retried: back to pending, attempts reset")
        self.message_user(request, f"Retried {len(result.retried)} job(s).", messages.SUCCESS)
        problems = []
        if result.wrong_state:
            problems.append(
                f"{len(result.wrong_state)} job(s) left alone: only failed or skipped jobs "
                "can be retried"
            )
        if result.conflicts:
            problems.append(
                f"{len(result.conflicts)} job(s) refused: their question already has an active "
                "job of the same kind"
            )
        if problems:
            self.message_user(request, "; ".join(problems) + ".", messages.WARNING)

    @admin.action(permissions=["skip"], description="Skip selected pending or processing jobs")
    def skip_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        result = queue.skip(queryset.values_list("pk", flat=True))
        self._log_each(request, result.skipped, "Skipped by an operator")
        self.message_user(request, f"Skipped {len(result.skipped)} job(s).", messages.SUCCESS)
        if result.wrong_state:
            self.message_user(
                request,
                f"{len(result.wrong_state)} job(s) left alone: already finished.",
                messages.WARNING,
            )

    @admin.action(permissions=["reset_stale"], description="Reset selected stale jobs")
    def reset_stale_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        result = queue.reset_stale(job_ids=ids)
        self._report_stale(request, result, selected=len(ids))

    def _report_stale(
        self, request: HttpRequest, result: queue.StaleResult, selected: int | None
    ) -> None:
        self._log_each(request, result.reset_ids, "Reset as stale: back to pending")
        self._log_each(request, result.failed_ids, "Stale with no attempts left: failed")
        self.message_user(
            request,
            f"Reset {result.reset} stale job(s) to pending; {result.failed} ended failed "
            "(no attempts left).",
            messages.SUCCESS,
        )
        left = None if selected is None else selected - result.reset - result.failed
        if left:
            self.message_user(
                request,
                f"{left} job(s) left alone: not processing, or their heartbeat is recent "
                f"(threshold {conf.STALE_MINUTES:g} min).",
                messages.WARNING,
            )

    # -- the "Reset all stale jobs" button and the dashboard link

    def get_urls(self) -> list:
        urls = [
            path(
                "reset-stale/",
                self.admin_site.admin_view(self.reset_all_stale_view),
                name="studyqueue_studyquestionjob_reset_stale",
            ),
        ]
        return urls + super().get_urls()

    def reset_all_stale_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse("POST required", status=405)
        if not self.has_reset_stale_permission(request):
            raise PermissionDenied
        self._report_stale(request, queue.reset_stale(), selected=None)
        return HttpResponseRedirect(reverse("admin:studyqueue_studyquestionjob_changelist"))

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        extra_context = {
            **(extra_context or {}),
            "can_reset_stale": self.has_reset_stale_permission(request),
            "count_cap": CappedCountPaginator.CAP,
        }
        return super().changelist_view(request, extra_context)


# --------------------------------------------------------------------------- questions


class HasExplanationFilter(admin.SimpleListFilter):
    title = "has explanation"
    parameter_name = "explained"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "yes":
            return queryset.exclude(explanation="")
        if self.value() == "no":
            return queryset.filter(explanation="")
        return None


class JobInline(admin.TabularInline):
    model = StudyQuestionJob
    fields = (
        "job_link",
        "kind",
        "status_badge",
        "attempts",
        "error_code",
        "created_at",
        "completed_at",
    )
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ("-id",)
    show_change_link = False

    @admin.display(description="job")
    def job_link(self, job: StudyQuestionJob) -> str:
        url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
        return format_html('<a href="{}">#{}</a>', url, job.pk)

    @admin.display(description="status")
    def status_badge(self, job: StudyQuestionJob) -> str:
        return status_badge(job.status)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DeferringChangeList(ChangeList):
    """The question list reads an excerpt of each text, never the long columns."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer("text", "explanation", "choices", "answer").annotate(
            text_start=Left("text", EXCERPT * 4),
            explained=ExpressionWrapper(~Q(explanation=""), output_field=BooleanField()),
        )


@admin.register(StudyQuestion)
class StudyQuestionAdmin(admin.ModelAdmin):
    list_display = ("id", "text_excerpt", "has_explanation", "latest_job", "explained_at")
    list_display_links = ("id", "text_excerpt")
    list_filter = (HasExplanationFilter, "explanation_truncated")
    search_fields = ("text",)
    show_full_result_count = False
    paginator = CappedCountPaginator
    ordering = ("-id",)
    actions = ("enqueue_explanation",)
    inlines = (JobInline,)
    form = StudyQuestionForm
    readonly_fields = (
        "explanation_box",
        "explanation_model",
        "explanation_truncated",
        "explained_at",
        "created_at",
    )
    fieldsets = (
        (None, {"fields": ("text", "choices", "answer")}),
        (
            "Explanation (written by the LLM)",
            {
                "fields": (
                    "explanation_box",
                    "explanation_model",
                    "explanation_truncated",
                    "explained_at",
                    "created_at",
                )
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        latest = StudyQuestionJob.objects.filter(study_question=OuterRef("pk")).order_by("-id")
        return (
            super()
            .get_queryset(request)
            .annotate(
                latest_status=Subquery(latest.values("status")[:1]),
                latest_kind=Subquery(latest.values("kind")[:1]),
            )
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> Any:
        return DeferringChangeList

    def get_urls(self) -> list:
        urls = [
            path(
                "<path:object_id>/explanation.txt",
                self.admin_site.admin_view(self.explanation_text_view),
                name="studyqueue_studyquestion_explanation",
            ),
        ]
        return urls + super().get_urls()

    def explanation_text_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The whole explanation as plain text (it may be too long for a page)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        question = self.get_object(request, object_id)
        if question is None:
            raise Http404("no such question")
        return HttpResponse(question.explanation, content_type="text/plain; charset=utf-8")

    @admin.display(description="explanation")
    def explanation_box(self, question: StudyQuestion) -> str:
        if question.pk is None:
            return "-"
        url = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
        return long_text(question.explanation, url)

    @admin.display(description="question", ordering="text")
    def text_excerpt(self, question: StudyQuestion) -> str:
        start = getattr(question, "text_start", None)  # annotated in the list
        return excerpt(question.text if start is None else start, 80)

    @admin.display(description="explained", boolean=True)
    def has_explanation(self, question: StudyQuestion) -> bool:
        explained = getattr(question, "explained", None)  # annotated in the list
        return bool(question.explanation) if explained is None else bool(explained)

    @admin.display(description="latest job")
    def latest_job(self, question: StudyQuestion) -> str:
        status = getattr(question, "latest_status", None)
        if not status:
            return "-"
        return format_html("{} {}", getattr(question, "latest_kind", ""), status_badge(status))

    @admin.action(permissions=["change"], description="Enqueue explanation")
    def enqueue_explanation(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        created = queue.enqueue_many(ids, JobKind.EXPLANATION)
        self.message_user(
            request,
            f"Queued {created} explanation job(s); {len(ids) - created} already queued.",
            messages.SUCCESS,
        )


# --------------------------------------------------------------------------- dashboard


def _pct(value: int, top: int) -> float:
    return round(100.0 * value / top, 1) if top else 0.0


def _chart_rows(stats: dashboard.DashboardStats) -> dict[str, Any]:
    """Bar lengths (percent of the largest) beside the numbers they draw."""
    top_jobs, top_ms, top_err = stats.max_hour_jobs, stats.max_hour_llm_ms, stats.max_error_count
    hours = [
        {
            "label": h.start.strftime("%H:00"),
            "completed": h.completed,
            "failed": h.failed,
            "completed_pct": _pct(h.completed, top_jobs),
            "failed_pct": _pct(h.failed, top_jobs),
            "llm_s": round(h.llm_ms / 1000, 1),
            "llm_pct": _pct(h.llm_ms, top_ms),
        }
        for h in stats.hours
    ]
    errors = [{"code": code, "count": n, "pct": _pct(n, top_err)} for code, n in stats.top_errors]
    table = [
        {
            "status": status,
            "badge": status_badge(status),
            "window": "now" if status in (JobStatus.PENDING, JobStatus.PROCESSING) else "24 h",
            "counts": [
                (stats.active if status in stats.active else stats.finished_24h)
                .get(status, {})
                .get(kind, 0)
                for kind in JobKind.values
            ],
        }
        for status in JobStatus.values
    ]
    return {"hour_rows": hours, "error_rows": errors, "status_rows": table}


@admin.register(QueueDashboard)
class QueueDashboardAdmin(admin.ModelAdmin):
    """Staff with view permission on jobs see the dashboard; nothing here changes data."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(
            user.is_active and user.is_staff and user.has_perm("studyqueue.view_studyquestionjob")
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list:
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="studyqueue_queuedashboard_changelist",
            )
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        if not self.has_view_permission(request):
            raise PermissionDenied
        stats = dashboard.collect()
        context = {
            **_chart_rows(stats),
            **self.admin_site.each_context(request),
            "title": "Queue dashboard",
            "opts": self.model._meta,
            "stats": stats,
            "kinds": list(JobKind),
            "total": number_format(stats.total_estimate, force_grouping=True),
            "stale_minutes": f"{conf.STALE_MINUTES:g}",
            "pending_total": sum(stats.active.get(JobStatus.PENDING, {}).values()),
            "processing_total": sum(stats.active.get(JobStatus.PROCESSING, {}).values()),
            "oldest_pending": short_duration(stats.oldest_pending_age)
            if stats.oldest_pending_age is not None
            else None,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/studyqueue/dashboard.html", context)
