"""The job list and job pages: every field read-only; state changes only through actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue.admin import job_cells
from studyqueue.admin.common import (
    EXCERPT,
    LONG_COLUMNS,
    CappedCountPaginator,
    GuardedInputAdmin,
    ReadOnly,
    StaleFilter,
    change_link,
    column,
    completion_tokens,
    excerpt,
    explanation_box,
    link_column,
    log_change_set,
    long_text,
    stale_cutoff,
    status_badge,
)
from studyqueue.admin.timeline import timeline
from studyqueue.conf import conf
from studyqueue.models import MAX_ID, QueuePause, StudyQuestionJob
from studyqueue.queue import operations, transitions
from studyqueue.queue.operations import batches, refusals, retry_ended

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

# The question's start in the list: long enough to recognise it, two lines at most.
QUESTION_EXCERPT = 48


def _reply_field(name: str, description: StrOrPromise) -> Callable[[Any, StudyQuestionJob], object]:
    """A column of the reply that completed the job: its revision's ``name``, "-" if none."""

    @admin.display(description=description)
    def column(model_admin: Any, job: StudyQuestionJob) -> object:
        value = getattr(job.revision, name) if job.revision_id is not None else None
        return "-" if value is None or value == "" else value

    return column


@admin.register(StudyQuestionJob)
class StudyQuestionJobAdmin(ReadOnly, GuardedInputAdmin):
    # Few, compact columns: the list fits 1400 px with the admin's sidebar and filters open
    # (tests/test_admin_browser.py measures it).
    list_display = ("id", "question_cell", "state", "attempts_display", "when", "llm_time")
    list_display_links = ("id",)
    list_filter = (
        "status",
        "kind",
        "error_code",
        StaleFilter,
        ("created_at", admin.DateFieldListFilter),
        ("study_question__sets", admin.RelatedFieldListFilter),
    )
    list_per_page = 50
    search_fields = ("study_question__text", "error_message")
    search_help_text = _("Question text or error message; a number finds that job id.")
    show_full_result_count = False
    paginator = CappedCountPaginator
    ordering = ("-id",)
    actions = ("retry_jobs", "skip_jobs", "reset_stale_jobs")
    change_list_template = "admin/studyqueue/studyquestionjob/change_list.html"
    fieldsets = (
        (None, {"fields": ("question_link", "kind", "status_badge", "worker_id")}),
        (
            _("Attempts"),
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
        (_("Every attempt"), {"fields": ("attempt_timeline",)}),
        (
            _("Times"),
            {"fields": ("created_at", "started_at", "heartbeat_at", "completed_at", "claim_token")},
        ),
        (
            _("LLM"),
            {
                "fields": (
                    "reply_model",
                    "reply_prompt",
                    "max_tokens",
                    "retried_for_quality",
                    "reply_prompt_tokens",
                    "reply_completion_tokens",
                    "llm_time",
                    "reply_first_token_ms",
                    "reply_tokens_per_second",
                    "revision_link",
                    "explanation",
                )
            },
        ),
    )

    # -- read-only everywhere (ReadOnly); state changes only through these actions

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.retry_studyquestionjob")

    def has_skip_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.skip_studyquestionjob")

    def has_reset_stale_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.reset_stale_studyquestionjob")

    @admin.display(description=_("question"), ordering="study_question")
    def question_link(self, job: StudyQuestionJob) -> str:
        # A session's or a set's own job has no question: it names its owner, linked.
        owner = job.study_session or job.question_set
        if owner is not None:
            link = change_link(type(owner).__name__.lower(), owner.pk)
            name = capfirst(owner._meta.verbose_name)
            return format_html("{} {} {}", name, link, excerpt(str(owner), QUESTION_EXCERPT))
        if job.study_question_id is None:
            return gettext("(deleted)")
        link = change_link("studyquestion", job.study_question_id)
        text = getattr(job, "question_start", None) or ""
        return format_html("{} {}", link, excerpt(text, QUESTION_EXCERPT))

    @admin.display(description=_("question"), ordering="study_question")
    def question_cell(self, job: StudyQuestionJob) -> str:
        # The kind under it: no column of its own, it is nearly always the same one.
        kind = job.get_kind_display()
        return format_html('{}<div class="sq-sub">{}</div>', self.question_link(job), kind)

    status_badge = column(_("status"), status_badge, "status", ordering="status")

    @admin.display(description=_("attempts"))
    def attempts_display(self, job: StudyQuestionJob) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description=_("status"), ordering="status")
    def state(self, job: StudyQuestionJob) -> str:
        return job_cells.state_cell(job, stale_cutoff(timezone.now()))

    @admin.display(description=_("when"), ordering="created_at")
    def when(self, job: StudyQuestionJob) -> str:
        now = timezone.now()
        return job_cells.when_cell(job, now, stale_cutoff(now))

    @admin.display(description=_("LLM time"), ordering="llm_ms")
    def llm_time(self, job: StudyQuestionJob) -> str:
        if job.llm_ms is None:
            return "-"
        if job.llm_ms >= 1000:
            return gettext("%(seconds).1fs") % {"seconds": job.llm_ms / 1000}
        return gettext("%(ms)d ms") % {"ms": job.llm_ms}

    # -- the reply that completed the job: its metadata lives on its revision

    @admin.display(description=_("quality retried"))
    def retried_for_quality(self, job: StudyQuestionJob) -> str:
        # Words, not the boolean icons: "not retried" is no fault to show as a red cross.
        return str(_("yes, once")) if job.quality_retried else str(_("no"))

    reply_model = _reply_field("model", _("model"))
    reply_prompt = _reply_field("prompt_version", _("prompt version"))
    reply_prompt_tokens = _reply_field("prompt_tokens", _("prompt tokens"))
    reply_first_token_ms = _reply_field("first_token_ms", _("time to first token (ms)"))
    reply_tokens_per_second = _reply_field("tokens_per_second", _("tokens per second"))

    reply_completion_tokens = column(_("completion tokens"), completion_tokens, "revision")
    revision_link = link_column(_("revision"), "explanationrevision", "revision_id")
    explanation = column(_("explanation"), explanation_box, "study_question")
    attempt_timeline = column(_("timeline"), timeline)
    error_message_box = column(_("error message"), long_text, "error_message")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # The list shows an excerpt of each question: its long columns stay in the database.
        # The reply's revision comes along for its metadata, not its text (maybe megabytes);
        # joined here, Django's list_select_related would be ignored.
        long_columns = [f"study_question__{name}" for name in LONG_COLUMNS]
        related = ("study_question", "study_session", "question_set", "revision")
        queryset = super().get_queryset(request).select_related(*related)
        queryset = queryset.defer("error_message", "revision__text", *long_columns)
        return queryset.annotate(question_start=Left("study_question__text", EXCERPT * 4))

    # -- search: a number is a job id (fast, exact); anything else searches text

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip().lstrip("#")
        # ASCII digits only: "²".isdigit() is true too, and int("²") fails.
        if term.isascii() and term.isdigit() and int(term) <= MAX_ID:
            return queryset.filter(pk=int(term)), False
        return super().get_search_results(request, queryset, search_term)

    @admin.action(permissions=["retry"], description=_("Retry selected failed or skipped jobs"))
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        command = "manage.py retryjobs [--status failed|skipped] [--kind K] [--error-code CODE]"
        ids = self.action_ids(request, queryset, command)
        if ids is None:
            return
        with transaction.atomic(using=queryset.db):  # the change and its log entry
            result = retry_ended(ids)
            log_change_set(
                request,
                StudyQuestionJob,
                result.retried,
                gettext("Retried: back to pending, attempts reset"),
            )
        retried = len(result.retried)
        self.message_user(
            request, gettext("Retried %(count)d job(s).") % {"count": retried}, messages.SUCCESS
        )
        problems = []
        if result.wrong_state:
            problems.append(
                gettext("%(count)d job(s) left alone: only failed or skipped jobs can be retried")
                % {"count": len(result.wrong_state)}
            )
        if result.conflicts:
            problems.append(
                gettext(
                    "%(count)s job(s) refused: their question already has an active job of "
                    "the same kind (refused → active: %(jobs)s)"
                )
                % {"count": len(result.conflicts), "jobs": refusals(result.active_for)}
            )
        if problems:
            self.message_user(request, "; ".join(problems) + ".", messages.WARNING)

    @admin.action(permissions=["skip"], description=_("Skip selected pending or processing jobs"))
    def skip_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        command = "manage.py skipjobs [--status pending|processing] [--kind K] [--error-code CODE]"
        ids = self.action_ids(request, queryset, command)
        if ids is None:
            return
        with transaction.atomic(using=queryset.db):
            result = operations.skip(ids)
            log_change_set(
                request, StudyQuestionJob, result.skipped, gettext("Skipped by an operator")
            )
        skipped = len(result.skipped)
        self.message_user(
            request, gettext("Skipped %(count)d job(s).") % {"count": skipped}, messages.SUCCESS
        )
        if result.wrong_state:
            self.message_user(
                request,
                gettext("%(count)d job(s) left alone: already finished.")
                % {"count": len(result.wrong_state)},
                messages.WARNING,
            )

    @admin.action(permissions=["reset_stale"], description=_("Reset selected stale jobs"))
    def reset_stale_jobs(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = self.action_ids(request, queryset, "manage.py resetstale")
        if ids is None:
            return
        with transaction.atomic(using=queryset.db):
            parts = [transitions.reset_stale(job_ids=chunk) for chunk in batches(ids, queryset.db)]
            reset = [pk for part in parts for pk in part.reset_ids]
            failed = [pk for part in parts for pk in part.failed_ids]
            result = transitions.StaleResult(len(reset), len(failed), reset, failed)
            self._log_stale(request, result)
        self._report_stale(request, result, selected=len(ids))

    def _log_stale(self, request: HttpRequest, result: transitions.StaleResult) -> None:
        log_change_set(
            request, StudyQuestionJob, result.reset_ids, gettext("Reset as stale: back to pending")
        )
        log_change_set(
            request,
            StudyQuestionJob,
            result.failed_ids,
            gettext("Stale with no attempts left: failed"),
        )

    def _report_stale(
        self, request: HttpRequest, result: transitions.StaleResult, selected: int | None
    ) -> None:
        self.message_user(
            request,
            gettext(
                "Reset %(reset)d stale job(s) to pending; %(failed)d ended failed "
                "(no attempts left)."
            )
            % {"reset": result.reset, "failed": result.failed},
            messages.SUCCESS,
        )
        left = None if selected is None else selected - result.reset - result.failed
        if left:
            self.message_user(
                request,
                gettext(
                    "%(count)d job(s) left alone: not processing, or their heartbeat is "
                    "recent (threshold %(minutes)s min)."
                )
                % {"count": left, "minutes": f"{conf.STALE_MINUTES:g}"},
                messages.WARNING,
            )

    # -- the "Reset all stale jobs" button and the dashboard link

    def get_urls(self) -> list:
        view = self.admin_site.admin_view(self.reset_all_stale_view)
        name = "studyqueue_studyquestionjob_reset_stale"
        return [path("reset-stale/", view, name=name), *super().get_urls()]

    def reset_all_stale_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse(gettext("POST required"), status=405)
        if not self.has_reset_stale_permission(request):
            raise PermissionDenied
        with transaction.atomic(using=StudyQuestionJob.objects.all().db):  # and its log entry
            result = transitions.reset_stale()
            self._log_stale(request, result)
        self._report_stale(request, result, selected=None)
        return HttpResponseRedirect(reverse("admin:studyqueue_studyquestionjob_changelist"))

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        extra_context = {
            **(extra_context or {}),
            "can_reset_stale": self.has_reset_stale_permission(request),
            "pauses": QueuePause.objects.all(),
            "count_cap": CappedCountPaginator.CAP,
        }
        return super().changelist_view(request, extra_context)
