"""Question sets in the admin: a progress bar per set, when it will be done and whether it
makes its deadline (``sets.question_sets``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from studyqueue import times
from studyqueue.admin.common import GuardedInputAdmin
from studyqueue.models import StudyQuestionSet
from studyqueue.sets import question_sets

# Each state's colour and label, in the bar's order (its segments do not overlap).
STATES = (
    ("approved", "#16a34a", _("approved")),
    ("plain", "#22c55e", pgettext_lazy("question set", "explained, not approved or flagged")),
    ("flagged", "#d97706", _("flagged")),
    ("failed", "#dc2626", _("failed")),
    ("waiting", "#cbd5e1", _("waiting")),
)

# The counts under the bar, as ``setstatus`` counts them: "explained" is every explained
# question, approved and flagged ones included (``Progress.explained``): no "plain" count.
COUNTS = (
    ("explained", pgettext_lazy("question set", "explained")),
    *((key, label) for key, _colour, label in STATES if key != "plain"),
)


class QuestionSetForm(forms.ModelForm):
    """The set's name as every entry point spells it (``question_sets.clean_name``)."""

    # No max_length here: the column's limit applies to the NFC name, which is shorter than
    # the NFD spelling of the same Korean text (``clean_name`` checks it).
    name = forms.CharField(label=StudyQuestionSet._meta.get_field("name").verbose_name)

    class Meta:
        model = StudyQuestionSet
        fields = ("name", "deadline", "owner_email")

    def clean_name(self) -> str:
        try:
            return question_sets.clean_name(self.cleaned_data["name"])
        except question_sets.BadSetName as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_deadline(self) -> datetime | None:
        deadline = self.cleaned_data["deadline"]
        if deadline is not None and not times.in_range(deadline):
            raise forms.ValidationError(_("Out of range: too far in the past or the future."))
        return deadline


@admin.register(StudyQuestionSet)
class StudyQuestionSetAdmin(GuardedInputAdmin):
    form = QuestionSetForm
    list_display = ("name", "status", "deadline", "created_at")
    search_fields = ("name",)
    fields = ("name", "deadline", "owner_email", "status", "created_at")
    readonly_fields = ("status", "created_at")

    def save_model(
        self, request: HttpRequest, obj: StudyQuestionSet, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if "deadline" in form.changed_data:
            question_sets.deadline_changed(obj)

    @admin.display(description=_("progress"))
    def status(self, record: StudyQuestionSet) -> SafeString:
        """The bar, a segment per state sized by its share, the counts under it; when it will
        be done, whether it makes its deadline, when it started (one column: its few queries
        run once per set)."""
        if record.pk is None:
            return format_html("{}", "-")
        progress = question_sets.progress(record)
        total = max(progress.total, 1)
        segments = [
            (key, colour, label, n, f"{100 * n / total:.2f}")
            for key, colour, label in STATES
            if (n := getattr(progress, key))
        ]
        context = {
            "total": progress.total,
            "segments": segments,
            "counts": [(key, label, getattr(progress, key)) for key, label in COUNTS],
            "lines": question_sets.status_lines(progress)[1:],  # the bar shows the counts
        }
        return SafeString(render_to_string("admin/studyqueue/question_set_progress.html", context))
