"""Explanation revisions and their quality flags (each with a label and a one-line meaning,
``MEANINGS``: the admin's badges). The only writer of revisions and of a question's
explanation fields: every reply is kept, one is current, and a regeneration of an approved or
reviewer-edited explanation waits as a *candidate* for a reviewer (``settle``;
docs/reference/quality.md)."""

from __future__ import annotations

import logging
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from studyqueue.conf import conf
from studyqueue.explanations import answers
from studyqueue.explanations.prompts import PromptVersion
from studyqueue.models import (
    PROTECTED_REVIEWS,
    QUESTION_CHANGED_FLAG,
    ErrorCode,
    ExplanationRevision,
    FinishReason,
    ReviewStatus,
    StudyQuestion,
    StudyQuestionJob,
    checks_after_explanation,
    fit,
)
from studyqueue.queue import retry, transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.operations import batches
from studyqueue.queue.store import Fenced
from studyqueue.queue.transitions import Outcome
from studyqueue.services.llm import LLMReply

logger = logging.getLogger("studyqueue.revisions")


class QualityFlag(models.TextChoices):
    """What a reply can be flagged for (stored as the values, in this order)."""

    TRUNCATED = "truncated", _("truncated")
    UNFINISHED = "unfinished", _("unfinished")
    TOO_SHORT = "too_short", _("too short")
    WRONG_SCRIPT = "wrong_script", _("wrong script")
    # Appended, so that a cut reply (which often loses its answer line) retries as truncated.
    ANSWER_MISMATCH = "answer_mismatch", _("answer mismatch")
    NO_ANSWER_STATED = "no_answer_stated", _("no answer stated")
    QUESTION_CHANGED = QUESTION_CHANGED_FLAG, _("question changed")
    # Set after the explanation was kept, by the blind verifier (``verifier``): never retried.
    VERIFIER_DISAGREES = "verifier_disagrees", _("verifier disagrees")
    VERIFIER_UNSURE = "verifier_unsure", _("verifier unsure")
    # Set after the explanation was kept, by the step check (``step_check``): never retried.
    WRONG_STEP = "wrong_step", _("wrong step")
    STEP_CHECK_UNSURE = "step_check_unsure", _("step check unsure")


# The names the rest of the code and the settings know them by.
TRUNCATED, UNFINISHED = QualityFlag.TRUNCATED, QualityFlag.UNFINISHED
TOO_SHORT, WRONG_SCRIPT = QualityFlag.TOO_SHORT, QualityFlag.WRONG_SCRIPT
ANSWER_MISMATCH, NO_ANSWER_STATED = QualityFlag.ANSWER_MISMATCH, QualityFlag.NO_ANSWER_STATED
VERIFIER_DISAGREES, VERIFIER_UNSURE = QualityFlag.VERIFIER_DISAGREES, QualityFlag.VERIFIER_UNSURE
VERIFIER_FLAGS = (VERIFIER_DISAGREES, VERIFIER_UNSURE)
WRONG_STEP, STEP_CHECK_UNSURE = QualityFlag.WRONG_STEP, QualityFlag.STEP_CHECK_UNSURE
FLAGS: tuple[QualityFlag, ...] = tuple(QualityFlag)
# What each flag means, in one line: the admin's badges show it on hover.
MEANINGS: dict[str, str | Promise] = {
    TRUNCATED: _("The model stopped at max_tokens: the text may end mid-sentence."),
    UNFINISHED: _("The reply ended for another reason than finishing (a filter, no reason)."),
    TOO_SHORT: _("Shorter than QUALITY_MIN_CHARS characters."),
    WRONG_SCRIPT: _("Written in another script than the question (e.g. English for Korean)."),
    ANSWER_MISMATCH: _("The answer the explanation states is not the question's key."),
    NO_ANSWER_STATED: _("The explanation states no answer that could be read."),
    QUESTION_CHANGED_FLAG: _("The question's text, choices or key changed after it was written."),
    VERIFIER_DISAGREES: _(
        "Shown the explanation's reasoning with every statement of its answer hidden, the "
        "model named another choice than the key: the reasoning may argue for the wrong answer."
    ),
    VERIFIER_UNSURE: _(
        "Shown the explanation's reasoning with every statement of its answer hidden, the "
        "model named no choice, or several; or it was not asked, because the statements could "
        "not be hidden: the reasoning may not support any answer."
    ),
    WRONG_STEP: _(
        "Shown the key and the explanation sentence by sentence, the model named a sentence "
        "as the first wrong one: the explanation may reach the key through a false step."
    ),
    STEP_CHECK_UNSURE: _(
        "Shown the key and the explanation sentence by sentence, the model's reply named no "
        "single sentence and did not say that none is wrong: the steps were not checked."
    ),
}
# Reply verdicts that are flags (agreeing, or a question without a key, is none).
_ANSWER_FLAGS = {answers.Verdict.DIFFERS: ANSWER_MISMATCH, answers.Verdict.UNREAD: NO_ANSWER_STATED}
# Kana count with the ideographs: Japanese mixes kana and kanji in one text.
_SAME = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}
_SAMPLE = 2000  # characters looked at: enough to know the script, cheap for any length


def dominant_script(text: str) -> str | None:
    """The script most of a text's letters are in (``LATIN``, ``HANGUL``, ``CJK``…), or None."""
    counts: Counter[str] = Counter()
    # Each distinct character named once: the Unicode name lookup is the cost.
    for char, times in Counter(text[:_SAMPLE]).items():
        name = unicodedata.name(char, "") if unicodedata.category(char).startswith("L") else ""
        if name:
            script = name.split(" ", 1)[0]
            counts[_SAME.get(script, script)] += times
    return counts.most_common(1)[0][0] if counts else None


def flags_for(
    question_text: str,
    explanation: str,
    finish_reason: str,
    *,
    agreement: answers.Agreement | None = None,
) -> list[QualityFlag]:
    """The quality flags a reply earns, in ``FLAGS`` order (``agreement``: from ``compare``)."""
    flags = []
    if finish_reason == FinishReason.LENGTH:
        flags.append(TRUNCATED)
    elif finish_reason != FinishReason.STOP:  # only "stop" says the model finished its answer
        flags.append(UNFINISHED)
    if len(explanation.strip()) < conf.QUALITY_MIN_CHARS:
        flags.append(TOO_SHORT)
    asked, answered = dominant_script(question_text), dominant_script(explanation)
    if asked and answered and asked != answered:
        flags.append(WRONG_SCRIPT)
    if agreement is not None and agreement.verdict in _ANSWER_FLAGS:
        flags.append(_ANSWER_FLAGS[agreement.verdict])
    return flags


@dataclass(frozen=True)
class Checked:
    """An explanation checked: its flags and the answer it states (blank: none read)."""

    flags: list[QualityFlag]
    stated: str


def check(question: StudyQuestion, explanation: str, finish_reason: str) -> Checked:
    """The checks every explanation gets, a model's reply or a reviewer's correction alike."""
    agreement = answers.compare(explanation, question.choices, question.answer)
    flags = flags_for(question.text, explanation, finish_reason, agreement=agreement)
    return Checked(flags, agreement.stated)


def parse_flags(text: str) -> tuple[set[QualityFlag], list[str]]:
    """``QUALITY_RETRY``'s list of names: the flags it names, and the others (sorted)."""
    names = {name.strip() for name in text.split(",")} - {""}
    known = {QualityFlag(name) for name in names if name in QualityFlag.values}
    return known, sorted(names - known)


def reply_fields(job: StudyQuestionJob, reply: LLMReply, *more: str) -> dict[str, Any]:
    """The ``WrittenText`` columns a reply fills: its job, its text, its figures and the
    ``more`` its model adds (each column named as the reply names it)."""
    figures = ("model", "endpoint", "prompt_tokens", "completion_tokens", "tokens_counted")
    values = {name: getattr(reply, name) for name in (*figures, "tokens_per_second", *more)}
    return {"job_id": job.pk, "text": reply.content, **values}


def add(
    job: StudyQuestionJob,
    question_id: int,
    reply: LLMReply,
    version: PromptVersion,
    flags: Sequence[str],
    *,
    stated_answer: str = "",
) -> ExplanationRevision:
    """Keep a reply as a revision of the question (not current yet)."""
    return ExplanationRevision.objects.create(
        question_id=question_id,
        **reply_fields(job, reply, "cached_tokens", "first_token_ms", "finish_reason"),
        prompt_version=version.hash,
        prompt_label=version.label,
        flags=list(flags),
        stated_answer=fit(ExplanationRevision, "stated_answer", stated_answer),
    )


@dataclass(frozen=True)
class Written(Fenced):
    """A reply to keep; ``retry_flag``: why the job runs once more, with ``max_tokens``."""

    question: StudyQuestion
    reply: LLMReply
    version: PromptVersion
    flags: list[str]
    stated: str = ""
    retry_flag: str = ""
    max_tokens: int | None = None

    def writes(self, job: StudyQuestionJob) -> Outcome:
        """Job, attempt, revision and question, fenced by the claim and the question's
        content."""
        # Locked until the commit: an edit waits, or came first and the content differs.
        # NO KEY: inserting a job that refers to the question is not blocked. The current
        # revision's review comes in the same read (``of``: only the question is locked).
        now = (
            StudyQuestion.objects.select_for_update(no_key=True, of=("self",))
            .select_related("current_revision")
            .only("text", "choices", "answer", "current_revision__review_status")
            .filter(pk=self.question.pk)
            .first()
        )
        if now is None:
            return _question_missing(job)
        if now.content_hash() != self.question.content_hash():
            # Edited during the call: nothing is stored, the job runs again.
            logger.warning(
                "study_reply_dropped id=%s question=%s reason=question_changed free_releases=%s",
                job.pk,
                self.question.pk,
                job.free_releases,
            )
            return _changed(job, "the question changed during the LLM call; its reply was dropped")
        revision = add(job, now.pk, self.reply, self.version, self.flags, stated_answer=self.stated)
        if self.retry_flag:
            reason = f"retried once: the reply was flagged {self.retry_flag}"
            outcome = transitions.retry_for_quality(
                job, reason=reason, max_tokens=self.max_tokens, revision=revision
            )
        else:
            outcome = transitions.complete(job, revision=revision, llm_ms=self.reply.elapsed_ms)
            if outcome is Outcome.COMPLETED and not settle(revision, now.current_revision):
                transaction.set_rollback(True, using=job._state.db)  # undo "completed": none kept
                return _question_missing(job)
        checkable = outcome is Outcome.COMPLETED and now.checkable()
        for kind, setting in checks_after_explanation() if checkable else ():
            if getattr(conf, setting):
                enqueue(now.pk, kind)  # checked later
        if outcome is Outcome.COMPLETED and self.flags:
            logger.warning(
                "study_explanation_flagged id=%s question=%s flags=%s",
                job.pk,
                self.question.pk,
                ",".join(self.flags),
            )
        return outcome


def complete_if_unchanged(
    job: StudyQuestionJob,
    seen: StudyQuestion,
    *,
    fields: Sequence[str],
    during: str,
    dropped: str,
    **done: Any,
) -> tuple[StudyQuestion | None, Outcome]:
    """A check's write: complete the job (``done``: ``transitions.complete``'s arguments) only while
    the question holds ``seen``'s content; the locked question, or None, and the outcome."""
    now = (
        StudyQuestion.objects.select_for_update(no_key=True)
        .only(*fields)
        .filter(pk=seen.pk)
        .first()
    )
    if now is None:
        message = f"the question was deleted {during}"
        return None, transitions.fail(job, ErrorCode.QUESTION_MISSING, message)
    if now.content_hash() != seen.content_hash():
        return None, _changed(job, f"the question changed {during}; {dropped}")
    outcome = transitions.complete(job, **done)
    return (None if outcome is Outcome.LOST else now), outcome


def _changed(job: StudyQuestionJob, message: str) -> Outcome:
    """The question was edited while the job ran: not the job's fault, it runs again."""
    failure = retry.Failure(ErrorCode.QUESTION_CHANGED, message, job_at_fault=False)
    return transitions.apply(job, failure, retry.decide(failure, job))


def _question_missing(job: StudyQuestionJob) -> Outcome:
    message = "the question was deleted while its explanation was being written"
    return transitions.fail(job, ErrorCode.QUESTION_MISSING, message)


def record_verdict(
    revision_id: int,
    question: StudyQuestion,
    *,
    flags: list[str],
    replaced: Sequence[str] = VERIFIER_FLAGS,
    **fields: Any,
) -> ExplanationRevision:
    """A check's verdict on a revision, in place: its ``fields`` (text cut to its column) and
    ``flags`` in place of its earlier ``replaced`` ones, on its current question too."""
    revision = ExplanationRevision.objects.select_for_update().get(pk=revision_id)
    revision.flags = _with_verdict(revision.flags or [], flags, replaced)
    for name, value in fields.items():
        text = isinstance(value, str)
        setattr(revision, name, fit(ExplanationRevision, name, value.strip()) if text else value)
    revision.save(update_fields=["flags", *fields])
    if question.current_revision_id == revision.pk:
        StudyQuestion.objects.filter(pk=question.pk).update(
            explanation_flags=_with_verdict(question.explanation_flags or [], flags, replaced)
        )
    return revision


def _with_verdict(
    stored: Sequence[str], verdict: Sequence[str], replaced: Sequence[str]
) -> list[str]:
    """A stored flags list with a check's ``replaced`` flags replaced by ``verdict``."""
    return [flag for flag in stored if flag not in replaced] + list(verdict)


def make_current(revision: ExplanationRevision) -> bool:
    """Show ``revision`` as its question's explanation; False if the question is gone."""
    updated = StudyQuestion.objects.filter(pk=revision.question_id).update(
        current_revision=revision,
        # The text it shows, and what the admin's filters read without a join.
        explanation=revision.text,
        explanation_prompt_version=revision.prompt_version,
        explanation_flags=revision.flags,
        updated_at=timezone.now(),
    )
    if updated and revision.candidate:  # an accepted (or restored) candidate waits no more
        ExplanationRevision.objects.filter(pk=revision.pk).update(candidate=False)
        revision.candidate = False
    if updated:
        logger.info(
            "study_revision_current question=%s revision=%s prompt_version=%s",
            revision.question_id,
            revision.pk,
            revision.prompt_version or "-",
        )
    return bool(updated)


def previous(revision: ExplanationRevision) -> ExplanationRevision | None:
    """The revision ``revision`` corrects, else the question's newest older one."""
    if revision.based_on_id is not None:
        return ExplanationRevision.objects.filter(pk=revision.based_on_id).first()
    older = ExplanationRevision.objects.filter(question_id=revision.question_id, pk__lt=revision.pk)
    return older.order_by("-pk").first()


def settle(revision: ExplanationRevision, current: ExplanationRevision | None) -> bool:
    """A completed job's revision: current, unless ``current`` (read under the question's
    lock) is approved or edited; then the newest candidate. False if the question is gone."""
    if current is None or not current.protected:
        return make_current(revision)
    waiting = ExplanationRevision.objects.filter(question_id=revision.question_id, candidate=True)
    waiting.exclude(pk=revision.pk).update(candidate=False)  # superseded, still kept
    ExplanationRevision.objects.filter(pk=revision.pk).update(candidate=True)
    revision.candidate = True
    logger.info(
        "study_revision_candidate question=%s revision=%s current=%s current_review=%s",
        revision.question_id,
        revision.pk,
        current.pk,
        current.review_status,
    )
    return True


@dataclass(frozen=True)
class ReviewState:
    """A revision's review as a reviewer saw it (``decide``'s compare-and-set)."""

    review_status: str
    reviewed_at: datetime | None
    candidate: bool

    @classmethod
    def of(cls, revision: ExplanationRevision) -> ReviewState:
        return cls(revision.review_status, revision.reviewed_at, revision.candidate)


def decide(
    revision: ExplanationRevision, status: ReviewStatus, *, by: str, seen: ReviewState | None = None
) -> bool:
    """Record a reviewer's decision on ``revision``; a candidate stops waiting. With
    ``seen``, a compare-and-set: False (nothing written) when another decision came first."""
    now = timezone.now()
    rows = ExplanationRevision.objects.filter(pk=revision.pk)
    if seen is not None:  # reviewed_at=None matches IS NULL
        rows = rows.filter(
            review_status=seen.review_status, candidate=seen.candidate, reviewed_at=seen.reviewed_at
        )
    if not rows.update(review_status=status, reviewed_by=by, reviewed_at=now, candidate=False):
        logger.info(
            "study_revision_review_refused question=%s revision=%s review=%s by=%s "
            "reason=decided_meanwhile",
            revision.question_id,
            revision.pk,
            status,
            by,
        )
        return False
    revision.review_status, revision.reviewed_by, revision.reviewed_at = status, by, now
    revision.candidate = False
    logger.info(
        "study_revision_reviewed question=%s revision=%s review=%s by=%s",
        revision.question_id,
        revision.pk,
        status,
        by,
    )
    return True


def content_changed(question_ids: Iterable[int], *, using: str) -> int:
    """The questions' content changed, in the transaction that changes it: their reviews are
    void, explanations flagged ``question_changed``, candidates dropped. How many were void."""
    void = 0
    revisions_ = ExplanationRevision.objects.using(using)
    for chunk in batches(sorted(set(question_ids)), using):
        # Every approval of the question, not only the current one: "make current" on an
        # older revision must not bring back an approval of content that is gone.
        voided = revisions_.filter(question_id__in=chunk, review_status__in=PROTECTED_REVIEWS)
        reviews = voided.values_list("pk", "question_id", "review_status", "reviewed_by")
        for pk, question_id, review, by in reviews:
            logger.info(
                "study_review_voided question=%s revision=%s review=%s by=%s "
                "reason=content_changed",
                question_id,
                pk,
                review,
                by or "-",
            )
        void += voided.update(
            review_status=ReviewStatus.UNREVIEWED, reviewed_by="", reviewed_at=None
        )
        _mark_outdated(StudyQuestion.objects.using(using).filter(pk__in=chunk), using=using)
        waiting = revisions_.filter(question_id__in=chunk, candidate=True)
        for pk, question_id in waiting.values_list("pk", "question_id"):
            logger.info(
                "study_candidate_cleared question=%s revision=%s reason=content_changed",
                question_id,
                pk,
            )
        waiting.update(candidate=False)
    return void


def _mark_outdated(questions: QuerySet[StudyQuestion], *, using: str) -> None:
    """Flag each explanation ``question_changed``, on the question only (not the reply's)."""
    changed = []
    for question in questions.exclude(explanation="").only("pk", "explanation_flags"):
        flags = question.explanation_flags if isinstance(question.explanation_flags, list) else []
        if QUESTION_CHANGED_FLAG not in flags:
            question.explanation_flags = [*flags, QUESTION_CHANGED_FLAG]
            changed.append(question)
    StudyQuestion.objects.using(using).bulk_update(changed, ["explanation_flags"])


def add_correction(
    based_on: ExplanationRevision,
    text: str,
    *,
    by: str,
    flags: Sequence[str] = (),
    stated_answer: str = "",
) -> ExplanationRevision:
    """A reviewer's corrected text as a new revision by ``by`` (not current yet)."""
    return ExplanationRevision.objects.create(
        question_id=based_on.question_id,
        text=text,
        flags=list(flags),
        stated_answer=fit(ExplanationRevision, "stated_answer", stated_answer),
        prompt_version=based_on.prompt_version,
        prompt_label=based_on.prompt_label,
        finish_reason="stop",
        based_on=based_on,
        **edited_by(by, timezone.now()),
    )


def edited_by(by: str, at: datetime) -> dict[str, Any]:
    """A reviewer's correction's own columns: written, and reviewed as ``EDITED``, by ``by``."""
    return dict(author=by, review_status=ReviewStatus.EDITED, reviewed_by=by, reviewed_at=at)
