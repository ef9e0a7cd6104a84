"""Forms for the operator's admin."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.utils.translation import gettext_lazy

from studyqueue.models import StudyQuestion, unstorable, validate_choices


def validate_storable(value: str) -> None:
    """Refuse text no database column can store, with a form error, not a database error."""
    if unstorable(value):
        raise ValidationError(
            gettext_lazy(
                "The text holds a character that cannot be stored (a NUL or a lone surrogate)."
            ),
            code="unstorable",
        )


class StorableTextField(forms.CharField):
    """Text a person writes, checked by ``validate_storable`` (not Django's NUL-only check)."""

    widget = forms.Textarea

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ] + [validate_storable]


class ChoicesField(forms.CharField):
    """A question's choices edited as text, one choice per line (blank lines dropped)."""

    widget = forms.Textarea(attrs={"rows": 5, "cols": 60})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", gettext_lazy("One answer option per line."))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(str(choice) for choice in value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def validate(self, value: Any) -> None:
        validate_choices(value)
        for number, choice in enumerate(value, start=1):
            # The list is stored as JSON: PostgreSQL refuses a NUL even as an escape in it.
            if unstorable(choice):
                raise ValidationError(
                    gettext_lazy(
                        "Choice %(number)s holds a character that cannot be stored "
                        "(a NUL or a lone surrogate)."
                    ),
                    code="unstorable",
                    params={"number": number},
                )


class StudyQuestionForm(forms.ModelForm):
    """A question as an operator edits it; the explanation is written by the LLM only."""

    # A declared field takes no label from the model: give it the model field's.
    choices = ChoicesField(label=StudyQuestion._meta.get_field("choices").verbose_name)

    class Meta:
        model = StudyQuestion
        fields = ("text", "choices", "answer", "tags")
        field_classes = {"text": StorableTextField, "answer": StorableTextField}


class CorrectionForm(forms.Form):
    """A reviewer's corrected explanation: the same storable-text check as the question
    form; line ends and blank ends are normalised by ``review_queue.decide``."""

    text = StorableTextField(label=gettext_lazy("corrected text"), strip=False)
