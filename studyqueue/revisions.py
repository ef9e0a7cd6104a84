"""Explanation revisions: every generated explanation is kept; a question shows its current
one. A new revision becomes current only when its job completes; an older one can be made
current again. The only module that writes revisions and a question's explanation fields.

A revision is the one home of a reply's metadata (model, prompt version, tokens, timings,
finish reason, flags, the answer it states); the question keeps its current text and the two
facts its admin filters need, the job a pointer to the revision that completed it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from studyqueue import queue
from studyqueue.columns import fit
from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob
from studyqueue.prompts import PromptVersion
from studyqueue.services.llm import LLMReply

logger = logging.getLogger("studyqueue.revisions")


def add(
    job: StudyQuestionJob,
    question_id: int,
    reply: LLMReply,
    version: PromptVersion,
    flags: Sequence[str],
    *,
    stated_answer: str = "",
) -> ExplanationRevision:
    """Keep a reply as a revision of the question (not current yet), with the answer it
    states (``answers.compare``; cut to the column)."""
    return ExplanationRevision.objects.using(queue.database()).create(
        question_id=question_id,
        job_id=job.pk,
        text=reply.content,
        model=reply.model,
        prompt_version=version.hash,
        prompt_label=version.label,
        prompt_tokens=reply.prompt_tokens,
        cached_tokens=reply.cached_tokens,
        completion_tokens=reply.completion_tokens,
        first_token_ms=reply.first_token_ms,
        tokens_per_second=reply.tokens_per_second,
        finish_reason=reply.finish_reason,
        flags=list(flags),
        stated_answer=fit(ExplanationRevision, "stated_answer", stated_answer),
    )


def make_current(revision: ExplanationRevision) -> bool:
    """Show ``revision`` as its question's explanation; False if the question is gone."""
    now = timezone.now()
    updated = (
        StudyQuestion.objects.using(queue.database())
        .filter(pk=revision.question_id)
        .update(
            current_revision=revision,
            # The text it shows, and what the admin's filters read without a join.
            explanation=revision.text,
            explanation_prompt_version=revision.prompt_version,
            explanation_flags=revision.flags,
            updated_at=now,
        )
    )
    if updated:
        logger.info(
            "study_revision_current question=%s revision=%s prompt_version=%s",
            revision.question_id,
            revision.pk,
            revision.prompt_version or "-",
        )
    return bool(updated)


def restore(revision: ExplanationRevision) -> bool:
    """An operator makes an older revision current again (one transaction)."""
    with transaction.atomic(using=queue.database()):
        return make_current(revision)
