"""Explanation revisions: every generated text, read-only; an older one can be made current."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy

from studyqueue.admin.common import (
    GuardedInputAdmin,
    ReadOnly,
    column,
    completion_tokens,
    excerpt,
    link_column,
    long_text,
)
from studyqueue.admin.flags import flag_badges, stated_beside_key
from studyqueue.explanations import revisions
from studyqueue.explanations.diff import side_by_side
from studyqueue.models import ExplanationRevision


@admin.register(ExplanationRevision)
class ExplanationRevisionAdmin(ReadOnly, GuardedInputAdmin):
    list_display = (
        "id", "question_link", "created_at", "model", "prompt_label", "flag_list",
        "stated_answer_display", "review_status", "is_current",
    )  # fmt: skip
    list_filter = ("prompt_version", "finish_reason", "review_status", "candidate")
    list_select_related = ("question",)
    ordering = ("-id",)
    actions = ("make_current",)
    fields = (
        "question_link", "text_box", "changes", "review_status", "reviewed_by", "reviewed_at",
        "author", "candidate_text", "model", "endpoint", "prompt_label", "prompt_version",
        "flag_list", "stated_answer_display", "verifier_answer", "verifier_reply", "verified_at",
        "step_check", "wrong_step", "wrong_step_text", "step_check_reply", "finish_reason",
        "prompt_tokens", "completion_tokens_shown", "first_token_ms", "tokens_per_second", "job",
        "created_at",
    )  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("text", "question__explanation")

    question_link = link_column(gettext_lazy("question"), "studyquestion", "question_id")
    completion_tokens_shown = column(gettext_lazy("completion tokens"), completion_tokens)

    @admin.display(description=gettext_lazy("current"))
    def is_current(self, revision: ExplanationRevision) -> str:
        # An older revision is not a fault: a word for the current one, nothing for others.
        return gettext("current") if revision.question.current_revision_id == revision.pk else ""

    @admin.display(description=gettext_lazy("candidate"))
    def candidate_text(self, revision: ExplanationRevision) -> str:
        # Not a fault either way: a word, not Django's red cross for a false boolean.
        return gettext("yes") if revision.candidate else gettext("no")

    flag_list = column(gettext_lazy("quality flags"), flag_badges, "flags")

    @admin.display(description=gettext_lazy("stated answer"))
    def stated_answer_display(self, revision: ExplanationRevision) -> str:
        return stated_beside_key(revision.stated_answer, revision.question.answer, revision.flags)

    text_box = column(gettext_lazy("text"), long_text, "text")

    @admin.display(description=gettext_lazy("changes from the previous revision"))
    def changes(self, revision: ExplanationRevision) -> str:
        previous = revisions.previous(revision)
        if previous is None:
            return "-"
        diff = side_by_side(previous.text, revision.text)
        url = reverse("admin:studyqueue_explanationrevision_change", args=[previous.pk])
        return render_to_string(
            "admin/studyqueue/side_by_side.html",
            {"diff": diff, "previous": previous, "revision": revision, "previous_url": url},
        )

    def has_restore_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("studyqueue.restore_explanationrevision")

    @admin.action(
        permissions=["restore"], description=gettext_lazy("Make the selected revision current")
    )
    def make_current(self, request: HttpRequest, queryset: QuerySet) -> None:
        chosen = list(queryset[:2])
        if len(chosen) != 1:
            self.message_user(request, gettext("Select exactly one revision."), messages.WARNING)
            return
        (revision,) = chosen
        with transaction.atomic(using=revision._state.db):
            restored = revisions.make_current(revision)
        if not restored:
            self.message_user(request, gettext("Its question no longer exists."), messages.WARNING)
            return
        values = {"revision": revision.pk, "question": revision.question_id}
        self.log_change(
            request,
            revision.question,
            gettext("Made revision %(revision)s the current explanation") % values,
        )
        self.message_user(
            request,
            gettext("Revision %(revision)s is now the explanation of question #%(question)s:")
            % values
            + f" {excerpt(revision.text)}",
            messages.SUCCESS,
        )
