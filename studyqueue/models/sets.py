"""Question sets: a named batch of questions with a deadline and an owner."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from studyqueue.models.base import StudyQueueModel, blank_text
from studyqueue.models.questions import StudyQuestion


class StudyQuestionSet(StudyQueueModel):
    """A named batch of questions, as a teacher thinks of them ("the 2026 midterm"): a
    question may belong to several. Its progress is its questions' explanations
    (``sets.question_sets``)."""

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
    # The end of the last job of the completion last noticed (or whose notice gave up): the
    # sweep looks at the set again only once a job of it ended after this.
    noticed_through = models.DateTimeField(_("noticed through"), null=True, blank=True)
    # The completion (``notices.completion_key``: its membership) a notice job was
    # queued for: never queued again, even when its notice failed for good (a refusing
    # receiver) or a regeneration ended since.
    notice_queued_for = blank_text(_("notice queued for"), 100)
    # The completion last noticed (signal and e-mail sent): a notice job for it finds it
    # here, under a compare-and-set, and sends nothing (exactly once across consumers).
    noticed_key = blank_text(_("noticed completion"), 100)
    created_at = models.DateTimeField(_("created"), default=timezone.now)

    class Meta(StudyQueueModel.Meta):
        ordering = ["-created_at", "name"]
        verbose_name = _("question set")
        verbose_name_plural = _("question sets")

    def __str__(self) -> str:
        return self.name
