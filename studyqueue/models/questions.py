"""Study questions, their explanations' revisions and reviews, and the state of their key
audit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, OuterRef, Q, Value
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue.models.base import (
    StudyQueueManager,
    StudyQueueModel,
    blank_choice,
    blank_text,
    choice_width,
    database,
    endpoint_field,
    external_id_field,
    reply_figure,
    tokens_counted_field,
)


def validate_choices(value: object) -> None:
    """Choices are a list of strings (possibly empty); anything else is refused."""
    if not isinstance(value, list):
        raise ValidationError(
            "Choices must be a list of strings, not %(kind)s.",
            code="invalid_choices",
            params={"kind": type(value).__name__},
        )
    for number, choice in enumerate(value, start=1):
        if not isinstance(choice, str):
            raise ValidationError(
                "Choice %(number)s must be a string, not %(kind)s.",
                code="invalid_choices",
                params={"number": number, "kind": type(choice).__name__},
            )
        if not choice.strip():
            raise ValidationError(
                "Choice %(number)s is empty.", code="invalid_choices", params={"number": number}
            )


# The quality flag (``revisions.QualityFlag``) a question's explanation gets when that content
# changes after it was written: such an explanation is outdated whatever its prompt version.
QUESTION_CHANGED_FLAG = "question_changed"


class KeyAudit(models.TextChoices):
    """What the key audit found: the model, asked for the answer alone (never shown the key),
    against the key (``explanations.key_audit``). Blank: not audited (for this content)."""

    AGREES = "agrees", _("Agrees")  # a majority of the samples names the key
    DISPUTED = "disputed", _("Disputed")  # every sample names the same other choice
    UNSURE = "unsure", _("Unsure")  # anything else, or replies it could not read


class KeyCheck(models.TextChoices):
    """A reviewer's decision on a disputed key."""

    KEPT = "kept", _("Key kept")  # the key stands; the model was wrong
    CHANGED = "changed", _("Key changed")  # the model's choice became the key


class QuestionQuerySet(models.QuerySet["StudyQuestion"]):
    """Questions by the state of their explanation."""

    def explained(self) -> QuestionQuerySet:
        return self.exclude(explanation="")

    def missing(self) -> QuestionQuerySet:
        return self.filter(explanation="")

    def outdated(self, version: str | Collection[str]) -> QuestionQuerySet:
        """Explained by none of the prompt versions given, or for content since changed."""
        return self.explained().filter(~self._current_q(version))

    def current(self, version: str | Collection[str]) -> QuestionQuerySet:
        return self.explained().filter(self._current_q(version))

    @staticmethod
    def _current_q(version: str | Collection[str]) -> Q:
        changed = Q(explanation_flags__icontains=f'"{QUESTION_CHANGED_FLAG}"')
        versions = [version] if isinstance(version, str) else list(version)
        return Q(explanation_prompt_version__in=versions) & ~changed

    def flagged(self, flag: str | None = None) -> QuestionQuerySet:
        """The current explanation carries ``flag`` (or any); matched in the JSON text, quotes
        included, as JSON ``contains`` is PostgreSQL-only."""
        flagged = self.explained().exclude(explanation_flags=[])
        if flag is None:
            return flagged
        return flagged.filter(explanation_flags__icontains=f'"{flag}"')

    def needs_review(self) -> QuestionQuerySet:
        """The current explanation is unreviewed, or a candidate waits to replace it."""
        waiting = ExplanationRevision.objects.filter(question=OuterRef("pk"), candidate=True)
        return self.explained().filter(
            Q(current_revision__isnull=True)
            | Q(current_revision__review_status=ReviewStatus.UNREVIEWED)
            | Exists(waiting)
        )

    def approved(self) -> QuestionQuerySet:
        """The current explanation was approved, or written by a reviewer."""
        return self.explained().filter(current_revision__review_status__in=PROTECTED_REVIEWS)


QuestionManager = StudyQueueManager.from_queryset(QuestionQuerySet)


class Tag(StudyQueueModel):
    """A short label questions share: a topic, a chapter, a source (imports bring them)."""

    name = models.CharField(verbose_name=_("name"), max_length=100, unique=True)

    class Meta(StudyQueueModel.Meta):
        ordering = ("name",)
        verbose_name = _("tag")
        verbose_name_plural = _("tags")

    def __str__(self) -> str:
        return self.name


class StudyQuestion(StudyQueueModel):
    """A question a learner studies; its explanation is written by the LLM."""

    text = models.TextField(
        verbose_name=_("text"), help_text=_("The question as shown to the learner.")
    )
    external_id = external_id_field(
        _("Your id for it (imports update the question with the same id).")
    )
    choices = models.JSONField(
        verbose_name=_("choices"),
        default=list,
        blank=True,
        validators=[validate_choices],
        help_text=_("Answer options, if any: a list of strings."),
    )
    answer = models.TextField(
        verbose_name=_("answer"), blank=True, help_text=_("The correct answer, if known.")
    )
    tags = models.ManyToManyField(
        Tag,
        verbose_name=_("tags"),
        blank=True,
        related_name="questions",
        help_text=_("Short labels: a topic, a chapter, a source."),
    )
    explanation = models.TextField(
        verbose_name=_("explanation"), blank=True, help_text=_("The current revision's text.")
    )
    # The current revision's prompt version and flags, kept here for the admin's outdated and
    # needs-review filters (fast on a million questions without a join); every other fact of
    # the reply is read from the revision. Written only with current_revision.
    # Database defaults too: rows inserted by raw SQL or by older code get them.
    explanation_prompt_version = blank_text(
        _("prompt version"), 12, db_index=True, help_text=_("The prompt version that wrote it.")
    )
    explanation_flags = models.JSONField(
        verbose_name=_("quality flags"),
        default=list,
        db_default=Value([], models.JSONField()),
        blank=True,
        help_text=_("Quality flags of the current explanation."),
    )
    current_revision = models.ForeignKey(
        "ExplanationRevision",
        verbose_name=_("current revision"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The revision shown as its explanation (its model, tokens, times)."),
    )
    # The key audit (``explanations.key_audit``): a change of the text, choices or key clears
    # it, or, for a dispute that waits for a reviewer, only the hash of the content it audited
    # (the hold stands until a new audit or the reviewer settles it; ``edits``).
    key_audit = blank_choice(
        _("key audit"), KeyAudit, _("What the model, asked for the answer alone, said of the key.")
    )
    key_audit_answer = models.PositiveSmallIntegerField(
        verbose_name=_("model's choice"),
        null=True,
        blank=True,
        help_text=_("The choice (1-based) every sample named instead of the key."),
    )
    key_audit_samples = models.JSONField(
        verbose_name=_("key audit samples"),
        default=list,
        db_default=Value([], models.JSONField()),
        blank=True,
        help_text=_("What each sample answered (a choice number, or null: unread)."),
    )
    key_audit_hash = blank_text(_("audited content"), 64)
    key_check = blank_choice(
        _("key check"), KeyCheck, _("A reviewer's decision on a disputed key.")
    )
    key_check_by = blank_text(_("key checked by"), 150)
    key_check_at = models.DateTimeField(verbose_name=_("key checked at"), null=True, blank=True)
    created_at = models.DateTimeField(
        verbose_name=_("created"), default=timezone.now, editable=False
    )
    updated_at = models.DateTimeField(verbose_name=_("updated"), auto_now=True)

    objects: ClassVar[QuestionManager] = QuestionManager()

    class Meta(StudyQueueModel.Meta):
        ordering = ["id"]
        verbose_name = _("study question")
        verbose_name_plural = _("study questions")
        indexes = [
            # The claim's "a disputed key holds this explanation" (``awaiting_key_check``, few
            # rows): without it every claim read the whole table (2.1 ms at 20,000 questions).
            models.Index(
                fields=["id"],
                condition=Q(key_audit=KeyAudit.DISPUTED, key_check=""),
                name="studyqueue_question_held",
            )
        ]

    def __str__(self) -> str:
        if "text" in self.get_deferred_fields():
            return f"#{self.pk}"  # a list that deferred the text: do not load it for this
        excerpt = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"#{self.pk} {excerpt}"

    def checkable(self) -> bool:
        """It has text, choices and a key: what the key audit and the blind verifier need."""
        return bool(self.text.strip() and self.choices and self.answer.strip())

    def content_hash(self) -> str:
        """A digest of what its prompt is built from (text, choices, answer)."""
        content = json.dumps([self.text, self.choices, self.answer], ensure_ascii=False)
        return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()

    def clean(self) -> None:
        # Also for an empty value: field validators skip None, which the column refuses.
        try:
            validate_choices(self.choices)
        except ValidationError as exc:
            raise ValidationError({"choices": exc.messages}) from None


def tag_names(question_ids: Collection[int], using: str | None = None) -> dict[int, list[str]]:
    """The tags' names of each question that has any, by its id, in order."""
    names: dict[int, list[str]] = {}
    links = StudyQuestion.tags.through.objects.using(using or database())
    links = links.filter(studyquestion__in=question_ids)
    for pk, name in links.order_by("tag__name").values_list("studyquestion_id", "tag__name"):
        names.setdefault(pk, []).append(name)
    return names


def awaiting_key_check() -> Q:
    """A question whose key the audit disputed and no reviewer has kept or changed yet."""
    return Q(key_audit=KeyAudit.DISPUTED, key_check="")


def key_audit_holds() -> bool:
    """The KEY_AUDIT_HOLDS setting: a disputed key holds its explanation for a reviewer."""
    from studyqueue.conf import conf

    return bool(conf.KEY_AUDIT_HOLDS)


class StepCheck(models.TextChoices):
    """What the step check found, shown the key and the explanation sentence by sentence
    (``explanations.step_check``). Blank: not checked."""

    OK = "ok", _("No wrong step")  # the model named no wrong sentence
    WRONG_STEP = "wrong_step", _("Wrong step")  # it named the first wrong sentence
    UNSURE = "unsure", _("Unsure")  # its reply could not be read as either


class FinishReason(models.TextChoices):
    """Why the LLM stopped writing, as the server says it (``finish_reason``). A server may
    send another word; it is kept as it is (cleaned, cut to the column)."""

    STOP = "stop", _("Stop")  # the model finished its answer
    LENGTH = "length", _("Length")  # cut at max_tokens: the text may end mid-sentence
    CONTENT_FILTER = "content_filter", _("Content filter")
    TOOL_CALLS = "tool_calls", _("Tool calls")
    NONE = "", _("None given")  # the reply ended without saying why


class ReviewStatus(models.TextChoices):
    """What a reviewer decided about a revision (one decision each, with who and when)."""

    UNREVIEWED = "unreviewed", _("unreviewed")  # nobody has judged it yet
    APPROVED = "approved", _("approved")  # fit to publish as it is
    REJECTED = "rejected", _("rejected")  # wrong: a regeneration was queued
    EDITED = "edited", _("edited")  # corrected by a reviewer (or the correction itself)


# A current explanation in these states is never replaced silently: a regeneration becomes a
# candidate revision that a reviewer accepts or rejects.
PROTECTED_REVIEWS = (ReviewStatus.APPROVED, ReviewStatus.EDITED)


class WrittenText(StudyQueueModel):
    """What a model (or a reviewer) wrote for a job, with its reply's figures and its review:
    an explanation revision or a session summary."""

    job = models.ForeignKey(
        "studyqueue.StudyQuestionJob",  # by name: jobs are defined on top of questions
        verbose_name=_("job"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    text = models.TextField(verbose_name=_("text"))
    model = models.CharField(verbose_name=_("model"), max_length=200, blank=True)
    endpoint = endpoint_field(
        _(
            "The server that wrote it, as its normalised URL (blank: written before "
            "servers were recorded, or by a reviewer)."
        )
    )
    prompt_tokens = reply_figure(_("prompt tokens"))
    completion_tokens = reply_figure(_("completion tokens"))
    tokens_counted = tokens_counted_field()
    tokens_per_second = models.FloatField(
        verbose_name=_("tokens per second"),
        null=True,
        blank=True,
        help_text=_(
            "Decode rate: tokens after the first over the time from the first to the last "
            "(blank: fewer than two tokens or under 50 ms)."
        ),
    )
    flags = models.JSONField(verbose_name=_("quality flags"), default=list, blank=True)
    created_at = models.DateTimeField(verbose_name=_("created"), default=timezone.now)
    author = blank_text(
        _("author"),
        150,
        help_text=_("Who wrote it: blank for the LLM, else the reviewer who corrected it."),
    )
    review_status = models.CharField(
        verbose_name=_("review status"),
        max_length=choice_width(ReviewStatus),
        choices=ReviewStatus.choices,
        default=ReviewStatus.UNREVIEWED,
        db_default=ReviewStatus.UNREVIEWED,
    )
    reviewed_by = blank_text(_("reviewed by"), 150)
    reviewed_at = models.DateTimeField(verbose_name=_("reviewed at"), null=True, blank=True)

    class Meta(StudyQueueModel.Meta):
        abstract = True


class ExplanationRevision(WrittenText):
    """One generated explanation of a question, kept for good; the question points at its
    current one. Written only through ``studyqueue.explanations.revisions``."""

    question = models.ForeignKey(
        StudyQuestion,
        verbose_name=_("question"),
        on_delete=models.CASCADE,
        related_name="revisions",
    )
    prompt_version = models.CharField(verbose_name=_("prompt version"), max_length=12, blank=True)
    prompt_label = models.CharField(verbose_name=_("prompt label"), max_length=200, blank=True)
    cached_tokens = reply_figure(
        _("cached tokens"),
        help_text=_("Prompt tokens the server served from its cache (blank: it did not say)."),
    )
    first_token_ms = reply_figure(_("time to first token (ms)"))
    finish_reason = models.CharField(
        verbose_name=_("finish reason"),
        max_length=20,
        blank=True,
        help_text=_("As the server said it (stop, length…)."),
    )
    stated_answer = blank_text(
        _("stated answer"),
        200,
        help_text=_(
            "The answer the reply states, as written (blank: none could be read, or it was "
            "written before answers were read)."
        ),
    )
    based_on = models.ForeignKey(
        "self",
        verbose_name=_("based on"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The revision a reviewer corrected into this one."),
    )
    candidate = models.BooleanField(
        verbose_name=_("candidate"),
        default=False,
        db_default=False,
        help_text=_(
            "Written for a question whose explanation was approved or edited: it becomes "
            "current only when a reviewer accepts it."
        ),
    )
    verifier_answer = models.PositiveSmallIntegerField(
        verbose_name=_("verifier's choice"),
        null=True,
        blank=True,
        help_text=_(
            "The choice (1-based) the blind verifier says the explanation supports (blank: "
            "it named none, or several, or it has not checked yet)."
        ),
    )
    verifier_reply = blank_text(_("verifier's reply"), 200)
    verified_at = models.DateTimeField(
        verbose_name=_("verified at"),
        null=True,
        blank=True,
        help_text=_("When the blind verifier checked it (blank: not checked)."),
    )
    step_check = blank_choice(
        _("step check"),
        StepCheck,
        _("What the step check found, shown the key (blank: not checked)."),
    )
    wrong_step = models.PositiveSmallIntegerField(
        verbose_name=_("wrong step"),
        null=True,
        blank=True,
        help_text=_("The number (1-based) of the first wrong sentence the step check named."),
    )
    wrong_step_text = blank_text(_("wrong sentence"), 300)
    step_check_reply = blank_text(_("step check's reply"), 200)

    class Meta(WrittenText.Meta):
        ordering = ["-id"]
        verbose_name = _("explanation revision")
        verbose_name_plural = _("explanation revisions")
        permissions = [
            ("restore_explanationrevision", _("Can make an older revision current")),
            ("review_explanation", _("Can review explanations (approve, reject, edit)")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(review_status__in=ReviewStatus.values),
                name="studyqueue_revision_review_status_valid",
            )
        ]
        indexes = [
            # The review queue's "a candidate waits for this question" (few rows).
            models.Index(
                fields=["question"],
                condition=Q(candidate=True),
                name="studyqueue_revision_candidate",
            )
        ]

    def __str__(self) -> str:
        return gettext("revision %(id)s of question %(question)s") % {
            "id": self.pk,
            "question": self.question_id,
        }

    @property
    def truncated(self) -> bool:
        """The LLM stopped at max_tokens: the text may be cut."""
        return self.finish_reason == FinishReason.LENGTH

    @property
    def protected(self) -> bool:
        """Approved or written by a reviewer: a regeneration must not replace it silently."""
        return self.review_status in PROTECTED_REVIEWS


def revision_to_verify(
    question: StudyQuestion, *, step_check: bool = False
) -> ExplanationRevision | None:
    """The revision a verification (``step_check``: a step check) job of ``question`` checks:
    its newest generated one not checked yet that is its current explanation (unless
    outdated) or a waiting candidate."""
    outdated = QUESTION_CHANGED_FLAG in (question.explanation_flags or [])
    shown = Q(pk__in=[]) if outdated else Q(pk=question.current_revision_id)
    unchecked = Q(step_check="") if step_check else Q(verified_at=None)
    return (
        ExplanationRevision.objects.filter(unchecked, question_id=question.pk, author="")
        .filter(shown | Q(candidate=True))
        .order_by("-pk")
        .first()
    )


class ExplanationReview(ExplanationRevision):
    """The admin's review page (a proxy so that it appears in the app's admin index)."""

    class Meta(StudyQueueModel.Meta):
        proxy = True
        verbose_name = _("explanation review")
        verbose_name_plural = _("explanation reviews")
        default_permissions = ()
