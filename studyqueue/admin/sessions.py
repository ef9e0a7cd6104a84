"""Study sessions: recorded by ``importsessions`` or the API, shown here read-only with their
answers and summaries. A summary is regenerated through ``summaries.queue_summaries`` (as
the commands do) and reviewed on the session's page: approve, edit, reject."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from studyqueue import times
from studyqueue.admin.common import (
    STATUS_COLOURS,
    GuardedInputAdmin,
    ReadOnly,
    badge,
    column,
    excerpt,
    link_column,
    log_change_set,
    long_text,
)
from studyqueue.admin.flags import SUMMARY_FLAGS, flag_badges
from studyqueue.admin.review import PERMISSION as REVIEW_PERMISSION
from studyqueue.admin.review import with_choice
from studyqueue.exceptions import ReviewConflict
from studyqueue.models import (
    JobStatus,
    ReviewStatus,
    SessionAnswer,
    SessionSummary,
    StudySession,
)
from studyqueue.sessions import figures, summaries

# A summary's state as ``summaries.as_json`` names it: its label and badge colour.
STATES = {
    "written": (gettext_lazy("written"), STATUS_COLOURS[JobStatus.COMPLETED]),
    "waiting": (gettext_lazy("waiting on explanations"), STATUS_COLOURS[JobStatus.PENDING]),
    "queued": (gettext_lazy("queued"), STATUS_COLOURS[JobStatus.PROCESSING]),
    "failed": (gettext_lazy("failed"), STATUS_COLOURS[JobStatus.FAILED]),
    "none": (gettext_lazy("none"), "#6b7280"),
}


def stated_shown(stated: dict[str, float]) -> str:
    """The score a summary states, as read: ``7/10 · 70%``; "none read" for none."""
    shown = [f"{stated['right']:g}/{stated['total']:g}"] if "right" in stated else []
    shown += [f"{stated['percent']:g}%"] if "percent" in stated else []
    return " · ".join(shown) or gettext("none read")


class SummaryFlagFilter(admin.SimpleListFilter):
    """The current summary carries a flag (matched in the JSON text: ``contains`` is
    PostgreSQL-only)."""

    title = gettext_lazy("summary flag")
    parameter_name = "flag"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(flag, label) for flag, (label, _, _) in SUMMARY_FLAGS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() in SUMMARY_FLAGS:
            return queryset.filter(summary__flags__icontains=f'"{self.value()}"')
        return None


class AnswerInline(ReadOnly, admin.TabularInline):
    model = SessionAnswer
    fields = (
        "position", "question_link", "question_text", "chosen_shown", "key_shown", "right_wrong",
    )  # fmt: skip
    readonly_fields = fields

    question_link = link_column(gettext_lazy("question"), "studyquestion", "question_id")

    @admin.display(description=gettext_lazy("chosen"))
    def chosen_shown(self, answer: SessionAnswer) -> str:
        return with_choice(answer.chosen, answer.choices)

    @admin.display(description=gettext_lazy("key"))
    def key_shown(self, answer: SessionAnswer) -> str:
        return with_choice(answer.key, answer.choices)

    @admin.display(description=gettext_lazy("result"))
    def right_wrong(self, answer: SessionAnswer) -> str:
        if answer.correct:
            return badge(gettext("right"), STATUS_COLOURS[JobStatus.COMPLETED])
        return badge(gettext("wrong"), STATUS_COLOURS[JobStatus.FAILED])


class SummaryInline(ReadOnly, admin.TabularInline):
    model = SessionSummary
    fields = ("written", "text_excerpt", "flag_list", "stated_figures", "author", "review_status")
    readonly_fields = fields
    ordering = ("-created_at", "-id")
    verbose_name_plural = gettext_lazy("summaries (newest first)")

    written = column(gettext_lazy("written"), times.shown, "created_at")

    @admin.display(description=gettext_lazy("text"))
    def text_excerpt(self, summary: SessionSummary) -> str:
        return excerpt(summary.text, 120)

    flag_list = column(gettext_lazy("quality flags"), flag_badges, "flags")
    stated_figures = column(gettext_lazy("stated figures"), stated_shown, "stated")


@admin.register(StudySession)
class StudySessionAdmin(ReadOnly, GuardedInputAdmin):
    list_display = (
        "id", "learner_link", "external_id", "when", "score", "status_badge", "flag_list",
        "is_outdated",
    )  # fmt: skip
    # No filter for the learner: it would link every learner on every page (0.8 MB for
    # 10,000); the search finds one, and ``?learner=`` (a local field) still filters.
    list_filter = (
        ("question_set", admin.RelatedFieldListFilter),
        SummaryFlagFilter,
        "summary__review_status",  # the summaries waiting for a reviewer
    )
    search_fields = ("learner", "external_id")
    actions = ("regenerate_summary",)
    inlines = (AnswerInline, SummaryInline)
    change_form_template = "admin/studyqueue/studysession/change_form.html"
    fieldsets = (
        (None, {"fields": ("external_id", "learner", "when", "ended_at", "question_set", "score")}),
        (
            gettext_lazy("Summary"),
            {"fields": ("status_badge", "text_box", "stated_figures", "flag_list", "review")},
        ),
        (gettext_lazy("The session's figures"), {"fields": ("figures_box",)}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return summaries.with_state(super().get_queryset(request).select_related("question_set"))

    def has_regenerate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.change_studysession")

    when = column(gettext_lazy("when"), times.shown, "started_at", ordering="started_at")

    @admin.display(description=gettext_lazy("learner"), ordering="learner")
    def learner_link(self, session: StudySession) -> str:
        url = reverse("admin:studyqueue_studysession_learner", args=[session.learner])
        return format_html('<a href="{}">{}</a>', url, session.learner)

    @admin.display(description=gettext_lazy("figures"))
    def figures_box(self, session: StudySession) -> str:
        shown = session.summary.figures if session.summary else {}
        return render_to_string("admin/studyqueue/studysession/figures.html", {"f": shown})

    @admin.display(description=gettext_lazy("score"))
    def score(self, session: StudySession) -> str:
        return f"{session.right}/{session.total}"

    @admin.display(description=gettext_lazy("summary"))
    def status_badge(self, session: StudySession) -> str:
        label, colour = STATES[summaries.status(session)]
        return badge(str(label), colour)

    @admin.display(description=gettext_lazy("summary flags"))
    def flag_list(self, session: StudySession) -> str:
        return flag_badges(session.summary.flags) if session.summary else "-"

    @admin.display(description=gettext_lazy("outdated"))
    def is_outdated(self, session: StudySession) -> str:
        # Not a fault of the session: a word when it is, nothing otherwise.
        return gettext("outdated") if summaries.outdated(session.answers.all()) else ""

    @admin.display(description=gettext_lazy("text"))
    def text_box(self, session: StudySession) -> str:
        return long_text(session.summary.text) if session.summary else "-"

    @admin.display(description=gettext_lazy("stated figures"))
    def stated_figures(self, session: StudySession) -> str:
        return stated_shown(session.summary.stated if session.summary else {})

    @admin.display(description=gettext_lazy("review"))
    def review(self, session: StudySession) -> str:
        summary = session.summary
        if summary is None:
            return "-"
        shown = [str(summary.get_review_status_display())]
        if summary.reviewed_by:
            shown.append(f"{summary.reviewed_by}, {times.shown(summary.reviewed_at)}")
        if summary.author:
            shown.append(gettext("written by %(by)s") % {"by": summary.author})
        return " · ".join(shown)

    # -- regenerate (the list's action and the page's button) and review on the page

    def _regenerate(self, request: HttpRequest, ids: list[int]) -> None:
        with transaction.atomic(using=StudySession.objects.all().db):  # jobs and log entry
            created = summaries.queue_summaries(ids)
            message = gettext("Regenerate summary: %(created)s summary job(s) queued") % {
                "created": created
            }
            log_change_set(request, StudySession, ids, message)
        self.message_user(
            request,
            gettext("Queued %(created)s summary job(s); %(already)s already queued.")
            % {"created": created, "already": len(ids) - created},
            messages.SUCCESS,
        )

    @admin.action(permissions=["regenerate"], description=gettext_lazy("Regenerate summary"))
    def regenerate_summary(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = self.action_ids(request, queryset, "manage.py importsessions FILE --enqueue")
        if ids is not None:
            self._regenerate(request, ids)

    def get_urls(self) -> list:
        views = {"regenerate": self.regenerate_view, "review": self.review_view}
        return [
            path(
                f"<int:session_id>/{name}/",
                self.admin_site.admin_view(view),
                name=f"studyqueue_studysession_{name}",
            )
            for name, view in views.items()
        ] + [
            path(
                "learner/<path:learner>/",
                self.admin_site.admin_view(self.learner_view),
                name="studyqueue_studysession_learner",
            ),
            *super().get_urls(),
        ]

    def learner_view(self, request: HttpRequest, learner: str) -> HttpResponse:
        """A learner's sessions over time, a bar per tag and what is due now."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = figures.learner(learner, timezone.now())
        if found is None:
            raise Http404(gettext("No learner %(id)s.") % {"id": learner})
        for session in found["sessions"]:
            session["state"] = STATES[session["summary"]][0]
            session["when"] = datetime.fromisoformat(session["started_at"])
        context = {
            **self.admin_site.each_context(request),
            **found,
            "opts": self.opts,
            "title": gettext("Learner %(id)s") % {"id": learner},
        }
        return TemplateResponse(request, "admin/studyqueue/studysession/learner.html", context)

    def regenerate_view(self, request: HttpRequest, session_id: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse(gettext("POST required"), status=405)
        if not self.has_regenerate_permission(request):
            raise PermissionDenied
        self._regenerate(request, [get_object_or_404(StudySession, pk=session_id).pk])
        return redirect("admin:studyqueue_studysession_change", session_id)

    def review_view(self, request: HttpRequest, session_id: int) -> HttpResponse:
        """Approve, edit or reject the current summary as the page showed it (its id and review
        are in the form): a summary replaced or decided meanwhile is refused."""
        if request.method != "POST":
            return HttpResponse(gettext("POST required"), status=405)
        if not request.user.has_perm(REVIEW_PERMISSION):
            raise PermissionDenied
        decision, summary_id = request.POST.get("decision", ""), request.POST.get("summary", "")
        try:
            if not summary_id.isdigit():
                raise ValueError(summary_id)
            with transaction.atomic(using=StudySession.objects.all().db):  # and its log entry
                summaries.review(
                    session_id,
                    int(summary_id),
                    decision,
                    by=request.user.get_username(),
                    seen=request.POST.get("seen", ""),
                    text=request.POST.get("text", ""),
                )
                said = gettext("Summary: %(decision)s") % {"decision": ReviewStatus(decision).label}
                self.log_change(request, StudySession.objects.get(pk=session_id), said)
        except ReviewConflict as conflict:
            self.message_user(request, str(conflict), messages.WARNING)
        except ValueError:
            self.message_user(request, gettext("Nothing decided: a bad form."), messages.ERROR)
        else:
            self.message_user(request, said, messages.SUCCESS)
        return redirect("admin:studyqueue_studysession_change", session_id)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        extra_context = {
            **(extra_context or {}),
            "can_regenerate": self.has_regenerate_permission(request),
            "can_review": request.user.has_perm(REVIEW_PERMISSION),
            # The review page's buttons and keys (their words too).
            "decisions": [
                ("approved", gettext("Approve"), "a"),
                ("rejected", gettext("Reject and regenerate"), "r"),
                ("edited", gettext("Save the correction"), "Ctrl+Enter"),
            ],
        }
        return super().change_view(request, object_id, form_url, extra_context)
