"""Study sessions: what a learner answered (scored against the key when recorded) and the
summaries the model wrote of them (``sessions``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue.models.base import StudyQueueModel, external_id_field
from studyqueue.models.questions import StudyQuestion, WrittenText
from studyqueue.models.sets import StudyQuestionSet


class StudySession(StudyQueueModel):
    """One sitting of a learner over some questions; recorded once, never edited."""

    external_id = external_id_field(
        _("The learning app's id for it (recording it again changes nothing).")
    )
    learner = models.CharField(_("learner"), max_length=200, db_index=True)
    started_at = models.DateTimeField(_("started"))
    ended_at = models.DateTimeField(_("ended"))
    question_set = models.ForeignKey(
        StudyQuestionSet,
        verbose_name=_("question set"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sessions",
    )
    right = models.PositiveIntegerField(_("right"), help_text=_("Answers that matched the key."))
    total = models.PositiveIntegerField(_("answers"))
    # What was recorded, as a digest: the same session sent again is known by it.
    fingerprint = models.CharField(_("fingerprint"), max_length=64)
    recorded_at = models.DateTimeField(_("recorded"), default=timezone.now)
    summary = models.ForeignKey(
        "SessionSummary",
        verbose_name=_("summary"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The current summary."),
    )

    class Meta(StudyQueueModel.Meta):
        ordering = ["-started_at", "-id"]
        verbose_name = _("study session")
        verbose_name_plural = _("study sessions")

    def __str__(self) -> str:
        return gettext("%(learner)s at %(when)s") % {
            "learner": self.learner,
            "when": timezone.localtime(self.started_at).strftime("%Y-%m-%d %H:%M:%S"),
        }


class SessionAnswer(StudyQueueModel):
    """One answer of a session, with the key it was scored against then: a question deleted
    or re-keyed later leaves it as it was (the summary is then outdated)."""

    session = models.ForeignKey(
        StudySession, verbose_name=_("session"), on_delete=models.CASCADE, related_name="answers"
    )
    position = models.PositiveSmallIntegerField(_("position"))
    question = models.ForeignKey(
        StudyQuestion,
        verbose_name=_("question"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="session_answers",
    )
    question_text = models.TextField(_("question text"))
    choices = models.JSONField(_("choices"), default=list, blank=True)
    chosen = models.TextField(_("chosen"), help_text=_("The choice number, or the text."))
    key = models.TextField(_("key"), help_text=_("The key when the session was recorded."))
    correct = models.BooleanField(_("correct"))
    seconds = models.PositiveIntegerField(_("seconds"), null=True, blank=True)

    class Meta(StudyQueueModel.Meta):
        ordering = ["session", "position"]
        verbose_name = _("session answer")
        verbose_name_plural = _("session answers")
        constraints = [
            models.UniqueConstraint(
                fields=["session", "position"], name="studyqueue_answer_position"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.position}"


class XapiStatement(StudyQueueModel):
    """An xAPI statement received: kept by its id, so that the same statement again is nothing
    new; an ``answered`` one is an answer of its registration's session until it is recorded."""

    statement_id = models.UUIDField(_("statement id"), unique=True)
    verb = models.TextField(_("verb"))
    # Set on the statements that make a session (answered, completed, terminated).
    registration = models.CharField(_("registration"), max_length=36, blank=True, db_index=True)
    timestamp = models.DateTimeField(_("timestamp"))
    stored_at = models.DateTimeField(_("stored"))
    digest = models.CharField(max_length=64)
    body = models.JSONField(_("statement"))
    session = models.ForeignKey(
        StudySession,
        verbose_name=_("session"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="statements",
    )

    class Meta(StudyQueueModel.Meta):
        ordering = ["timestamp", "id"]
        verbose_name = _("xAPI statement")
        verbose_name_plural = _("xAPI statements")

    def __str__(self) -> str:
        return str(self.statement_id)


class SessionSummary(WrittenText):
    """One summary the model wrote of a session (or a reviewer's correction), kept for good;
    the session points at its current one."""

    session = models.ForeignKey(
        StudySession, verbose_name=_("session"), on_delete=models.CASCADE, related_name="summaries"
    )
    stated = models.JSONField(
        _("stated figures"),
        default=dict,
        blank=True,
        help_text=_("The score the summary states, as read (right, total, percent)."),
    )
    figures = models.JSONField(
        _("figures"),
        default=dict,
        blank=True,
        help_text=_("The session's figures, computed when the summary was written."),
    )

    class Meta(WrittenText.Meta):
        ordering = ["-created_at", "-id"]
        verbose_name = _("session summary")
        verbose_name_plural = _("session summaries")

    def __str__(self) -> str:
        return gettext("summary %(id)s") % {"id": self.pk}
