"""Questions: edited by operators (text, choices, answer); the explanation is the LLM's."""

from __future__ import annotations

from datetime import datetime
from itertools import chain
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Left
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from studyqueue import times
from studyqueue.admin.common import (
    EXCERPT,
    LONG_COLUMNS,
    CappedCountPaginator,
    GuardedInputAdmin,
    ReadOnly,
    change_link,
    column,
    excerpt,
    explanation_box,
    link_column,
    log_change_set,
    status_badge,
)
from studyqueue.admin.flags import flag_badges, stated_beside_key
from studyqueue.explanations import edits, export, next_step, outdated, revisions
from studyqueue.forms import StudyQuestionForm
from studyqueue.models import (
    ExplanationRevision,
    JobKind,
    KeyAudit,
    QuestionQuerySet,
    StudyQuestion,
    StudyQuestionJob,
    Tag,
    awaiting_key_check,
)
from studyqueue.queue.operations import batches
from studyqueue.sets import question_sets

# Django's delete confirmation lists each question with its revisions and jobs: a page of
# this many questions is already long; the delete itself runs in one request too.
DELETE_LIMIT = 1_000


class SetActionForm(helpers.ActionForm):
    """The action bar's box: the question set "Add to the question set" puts them in."""

    set_name = forms.CharField(
        label=gettext_lazy("Question set"),
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": gettext_lazy("set name, for the set action")}),
    )


class ExplanationStateFilter(admin.SimpleListFilter):
    """Current (written by a live consumer's prompt version), outdated, or missing."""

    title = gettext_lazy("explanation")
    parameter_name = "explanation"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("current", gettext_lazy("Current")),
            ("outdated", gettext_lazy("Outdated")),
            ("missing", gettext_lazy("Missing")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        questions = cast(QuestionQuerySet, queryset)  # the questions' own QuerySet
        if self.value() == "missing":
            return questions.missing()
        if self.value() not in ("current", "outdated"):
            return None
        basis = outdated.basis()
        level = messages.INFO if basis.from_live else messages.WARNING
        messages.add_message(request, level, basis.summary, fail_silently=True)
        for warning in basis.warnings:
            messages.warning(request, warning, fail_silently=True)
        if self.value() == "current":
            return questions.current(basis.versions)
        return questions.outdated(basis.versions)


class ReviewFilter(admin.SimpleListFilter):
    """Explanations waiting for a reviewer (all, or flagged), or with a quality flag."""

    title = gettext_lazy("needs review")
    parameter_name = "review"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("waiting", gettext_lazy("Waiting for review (unreviewed or a candidate)")),
            ("waiting_flagged", gettext_lazy("Waiting for review, flagged")),
            ("any", gettext_lazy("Any flag")),
            *((flag.value, flag.label) for flag in revisions.FLAGS),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        questions = cast(QuestionQuerySet, queryset)
        value = self.value()
        if value == "waiting":
            return questions.needs_review()
        if value == "waiting_flagged":
            return questions.needs_review().flagged()
        if value == "any":
            return questions.flagged()
        if value is not None and value in revisions.FLAGS:
            return questions.flagged(value)
        return None


class KeyAuditFilter(admin.SimpleListFilter):
    """What the key audit found, not audited, or a disputed key waiting for a key check."""

    title = gettext_lazy("key audit")
    parameter_name = "key_audit"
    NONE, KEY_CHECK = "none", "key_check"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            *KeyAudit.choices,
            (self.KEY_CHECK, gettext_lazy("Disputed, waiting for a key check")),
            (self.NONE, gettext_lazy("Not audited")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        value = self.value()
        if value in KeyAudit.values:
            return queryset.filter(key_audit=value)
        if value == self.KEY_CHECK:
            return queryset.filter(awaiting_key_check())
        if value == self.NONE:
            return queryset.filter(key_audit="")
        return None


class RevisionInline(ReadOnly, admin.TabularInline):
    model = ExplanationRevision
    fields = (
        "revision_link", "created_at", "model", "prompt_label", "flag_list", "stated_answer",
        "finish_reason",
    )  # fmt: skip
    readonly_fields = fields
    ordering = ("-id",)
    verbose_name_plural = gettext_lazy("explanation revisions (newest first)")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # Which one is current, in the list's own query: ``revision.question`` would be read
        # once per revision shown.
        current = Q(question__current_revision=F("pk"))
        is_current = ExpressionWrapper(current, output_field=BooleanField())
        return super().get_queryset(request).annotate(is_current=is_current)

    @admin.display(description=gettext_lazy("revision"))
    def revision_link(self, revision: ExplanationRevision) -> str:
        link = change_link("explanationrevision", revision.pk)
        if getattr(revision, "is_current", False):  # annotated by get_queryset
            return format_html("{} ({})", link, gettext("current"))
        return link

    flag_list = column(gettext_lazy("quality flags"), flag_badges, "flags")


class JobInline(ReadOnly, admin.TabularInline):
    model = StudyQuestionJob
    fields = (
        "job_link", "kind", "status_badge", "attempts", "error_code", "created_at",
        "completed_at",
    )  # fmt: skip
    readonly_fields = fields
    ordering = ("-id",)

    job_link = link_column(gettext_lazy("job"), "studyquestionjob", "pk")
    status_badge = column(gettext_lazy("status"), status_badge, "status")


class DeferringChangeList(ChangeList):
    """The question list reads an excerpt of each text, never the long columns."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        queryset = super().get_queryset(request, exclude_parameters)
        return (
            queryset.defer(*LONG_COLUMNS)
            .annotate(
                text_start=Left("text", EXCERPT * 4),
                explained=ExpressionWrapper(~Q(explanation=""), output_field=BooleanField()),
                explained_at=F("current_revision__created_at"),
            )
            .prefetch_related("tags")
        )


@admin.register(Tag)
class TagAdmin(admin.ModelAdmin):
    search_fields = ("name",)


@admin.register(StudyQuestion)
class StudyQuestionAdmin(GuardedInputAdmin):
    list_display = (
        "id", "text_excerpt", "has_explanation", "flag_list", "tag_list", "latest_job",
        "explained_at",
    )  # fmt: skip
    list_display_links = ("id", "text_excerpt")
    list_filter = (
        ExplanationStateFilter,
        ReviewFilter,
        ("current_revision__review_status", admin.ChoicesFieldListFilter),
        KeyAuditFilter,
        ("sets", admin.RelatedFieldListFilter),
        "tags",  # every tag: the tags in use would be a join over every question, each page
    )
    search_fields = ("text", "=external_id", "=tags__name")
    autocomplete_fields = ("tags",)
    show_full_result_count = False
    paginator = CappedCountPaginator
    ordering = ("-id",)
    actions = ("regenerate_explanation", "download_csv", "add_to_set", "delete_selected")
    action_form = SetActionForm
    inlines = (RevisionInline, JobInline)
    form = StudyQuestionForm
    fieldsets = (
        # The answer the current explanation states, beside the key it should agree with.
        (None, {"fields": ("external_id", "text", "choices", ("answer", "stated_answer"), "tags")}),
        (
            gettext_lazy("Explanation (written by the LLM)"),
            {
                "fields": (
                    "explanation_box",
                    "explanation_model",
                    "explanation_prompt",
                    "explanation_truncated",
                    "flag_list",
                    "explained_at",
                    "current_revision_link",
                    "created_at",
                )
            },
        ),
        (
            gettext_lazy("Key audit (the model asked for the answer alone)"),
            {
                "fields": (
                    ("key_audit", "key_audit_answer"),
                    ("key_check", "key_check_by", "key_check_at"),
                )
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        latest = StudyQuestionJob.objects.filter(study_question=OuterRef("pk")).order_by("-id")
        status, kind = (Subquery(latest.values(name)[:1]) for name in ("status", "kind"))
        # The current revision's metadata comes along, not its text (the question holds that).
        questions = super().get_queryset(request).select_related("current_revision")
        questions = questions.defer("current_revision__text")
        return questions.annotate(latest_status=status, latest_kind=kind)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Operators edit the question itself; the rest of its page is shown, never edited.
        editable = StudyQuestionForm.Meta.fields
        return [name for name in flatten_fieldsets(self.fieldsets) if name not in editable]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> Any:
        return DeferringChangeList

    def get_urls(self) -> list:
        view = self.admin_site.admin_view(self.explanation_text_view)
        name = "studyqueue_studyquestion_explanation"
        return [path("<path:object_id>/explanation.txt", view, name=name), *super().get_urls()]

    def explanation_text_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The whole explanation as plain text (it may be too long for a page)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        question = self.get_object(request, object_id)
        if question is None:
            raise Http404("no such question")
        return HttpResponse(question.explanation, content_type="text/plain; charset=utf-8")

    @admin.display(description=gettext_lazy("prompt version"))
    def explanation_prompt(self, question: StudyQuestion) -> str:
        revision = question.current_revision
        if not question.explanation_prompt_version:
            return "-"
        label = revision.prompt_label if revision else question.explanation_prompt_version
        if question.explanation_prompt_version in outdated.basis().versions:
            return label
        return gettext("%(label)s (outdated: the prompt changed since)") % {"label": label}

    @admin.display(description=gettext_lazy("explanation model"))
    def explanation_model(self, question: StudyQuestion) -> str:
        revision = question.current_revision
        return revision.model if revision is not None and revision.model else "-"

    @admin.display(description=gettext_lazy("explanation truncated"))
    def explanation_truncated(self, question: StudyQuestion) -> str:
        revision = question.current_revision
        if revision is not None and revision.truncated:
            return flag_badges([revisions.TRUNCATED])
        return gettext("no")  # not a fault: no red cross

    flag_list = column(gettext_lazy("quality flags"), flag_badges, "explanation_flags")

    @admin.display(description=gettext_lazy("tags"))
    def tag_list(self, question: StudyQuestion) -> str:
        return ", ".join(tag.name for tag in question.tags.all())  # prefetched by the list

    @admin.display(description=gettext_lazy("stated answer"))
    def stated_answer(self, question: StudyQuestion) -> str:
        revision = question.current_revision
        if revision is None:
            return "-"
        return stated_beside_key(revision.stated_answer, question.answer, revision.flags)

    @admin.display(
        description=gettext_lazy("explained at"), ordering="current_revision__created_at"
    )
    def explained_at(self, question: StudyQuestion) -> str:
        when: datetime | None = getattr(question, "explained_at", None)  # annotated in the list
        if when is None:
            revision = question.current_revision
            when = revision.created_at if revision is not None else None
        # Formatted here: the change page would show a read-only callable's datetime raw (UTC).
        return times.shown(when)

    current_revision_link = link_column(
        gettext_lazy("current revision"), "explanationrevision", "current_revision_id"
    )
    explanation_box = column(gettext_lazy("explanation"), explanation_box)

    @admin.display(description=gettext_lazy("question"), ordering="text")
    def text_excerpt(self, question: StudyQuestion) -> str:
        text = excerpt(getattr(question, "text_start", ""), 80)  # annotated in the list
        ours = question.external_id  # the importer's id, under the text: no column's width
        return format_html('{}<div class="sq-sub">{}</div>', text, ours) if ours else text

    @admin.display(description=gettext_lazy("explained"), boolean=True)
    def has_explanation(self, question: StudyQuestion) -> bool:
        return bool(getattr(question, "explained", False))  # annotated in the list

    @admin.display(description=gettext_lazy("latest job"))
    def latest_job(self, question: StudyQuestion) -> str:
        status = getattr(question, "latest_status", None)
        if not status:
            return "-"
        kind = getattr(question, "latest_kind", "")
        label = JobKind(kind).label if kind in JobKind.values else kind
        return format_html("{} {}", label, status_badge(status))

    @admin.action(permissions=["view"], description=gettext_lazy("Download explanations as CSV"))
    def download_csv(
        self, request: HttpRequest, queryset: QuerySet
    ) -> StreamingHttpResponse | None:
        ids = self.action_ids(request, queryset, "manage.py exportexplanations --format csv")
        if ids is None:
            return None
        # Read in id batches: one query with 50,000 ids is past SQLite's parameter limit.
        rows = chain.from_iterable(
            export.export_rows(ids=chunk) for chunk in batches(ids, queryset.db)
        )
        response = StreamingHttpResponse(
            export.lines(rows, "csv"), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="explanations.csv"'
        return response

    @admin.action(
        permissions=["change"], description=gettext_lazy("Add to the question set named in the box")
    )
    def add_to_set(self, request: HttpRequest, queryset: QuerySet) -> None:
        name = (request.POST.get("set_name") or "").strip()
        if not name:
            self.message_user(
                request,
                gettext("Name the question set in the box beside the action."),
                messages.ERROR,
            )
            return
        ids = self.action_ids(request, queryset, "manage.py importquestions FILE --set NAME")
        if ids is None:
            return
        try:
            question_set, added = question_sets.add(name, ids)
        except question_sets.BadSetName as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(
            request,
            gettext("Question set %(name)s: %(added)s question(s) added, %(total)s in all.")
            % {
                "name": question_set.name,
                "added": added,
                "total": question_sets.questions(question_set).count(),
            },
            messages.SUCCESS,
        )

    @admin.action(permissions=["change"], description=gettext_lazy("Regenerate explanation"))
    def regenerate_explanation(self, request: HttpRequest, queryset: QuerySet) -> None:
        command = "manage.py enqueue --outdated | --missing | --question ID …"
        ids = self.action_ids(request, queryset, command)
        if ids is None:
            return
        with transaction.atomic(using=queryset.db):  # the jobs and their log entry
            queued = next_step.queue_jobs(ids)
            created = queued.created
            log_change_set(
                request,
                StudyQuestion,
                ids,
                gettext(
                    "Regenerate explanation: %(created)s job(s) queued for %(selected)s selected "
                    "question(s); the others already had one"
                )
                % {"created": created, "selected": len(ids)},
            )
        self.message_user(
            request,
            gettext("Queued %(created)s explanation job(s); %(already)s already queued.")
            % {"created": created, "already": queued.already},
            messages.SUCCESS,
        )
        if queued.audits:
            self.message_user(
                request,
                gettext("Queued %(audits)s key audit job(s) to run before the explanations.")
                % {"audits": queued.audits},
                messages.INFO,
            )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Saved as usual; a changed question says what it means for its explanations."""
        if not change:
            super().save_model(request, obj, form, change)
            return
        with edits.editing([obj.pk], using=obj._state.db) as edited:
            super().save_model(request, obj, form, change)
        said = []
        if edited.changed and obj.explanation:
            said.append(
                gettext(
                    "Its text, choices or key changed: its explanation is outdated until it is "
                    "regenerated."
                )
            )
        if edited.voided:
            said.append(
                gettext("The approval of its explanation is void: it waits for review again.")
            )
        if edited.audits:
            said.append(gettext("A new key audit was queued; the explanation waits for it."))
        if said:
            self.message_user(request, " ".join(said), messages.WARNING)

    @admin.action(permissions=["delete"], description=gettext_lazy("Delete selected questions"))
    def delete_selected(self, request: HttpRequest, queryset: QuerySet) -> Any:
        """Django's own delete, for at most ``DELETE_LIMIT`` questions."""
        if queryset.order_by().values("pk")[: DELETE_LIMIT + 1].count() > DELETE_LIMIT:
            self.message_user(
                request,
                gettext(
                    "Nothing deleted: select at most %(limit)s questions to delete at once "
                    "(narrow the list with the filters)."
                )
                % {"limit": number_format(DELETE_LIMIT, force_grouping=True)},
                messages.ERROR,
            )
            return None
        return delete_selected(self, request, queryset)
