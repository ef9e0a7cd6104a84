"""The explanation handler: build the prompt, ask the LLM through the gate, store the answer."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from studyqueue import queue
from studyqueue.conf import conf
from studyqueue.models import ErrorCode, StudyQuestion, StudyQuestionJob, validate_choices
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.services.mlx_gate import GateTimeout
from studyqueue.workers.base import (
    Outcome,
    WorkContext,
    fail_job,
    handle_llm_error,
    outcome_of,
    release_job,
)

logger = logging.getLogger("studyqueue.worker")

SYSTEM_TEMPLATE = "studyqueue/explanation_system.txt"


def build_messages(question: StudyQuestion) -> list[dict[str, str]]:
    """The chat messages for a question, from the prompt templates (valid choices only)."""
    validate_choices(question.choices)
    context = {"question": question, "choices": question.choices}
    return [
        {"role": "system", "content": render_to_string(SYSTEM_TEMPLATE).strip()},
        {"role": "user", "content": render_to_string(conf.PROMPT_TEMPLATE, context).strip()},
    ]


def _load(job: StudyQuestionJob, db: str) -> StudyQuestion | None:
    if job.study_question_id is None:
        return None
    return StudyQuestion.objects.using(db).filter(pk=job.study_question_id).first()


def _store(job: StudyQuestionJob, question_id: int, reply: LLMReply, db: str) -> Outcome:
    """Complete the job and write the explanation in one transaction; fenced."""
    with transaction.atomic(using=db):
        if not queue.complete(
            job,
            llm_model=reply.model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            llm_ms=reply.elapsed_ms,
            first_token_ms=reply.first_token_ms,
            tokens_per_second=reply.tokens_per_second,
        ):
            return Outcome.LOST
        now = timezone.now()
        written = (
            StudyQuestion.objects.using(db)
            .filter(pk=question_id)
            .update(
                explanation=reply.content,
                explanation_model=reply.model,
                explanation_truncated=reply.truncated,
                explained_at=now,
                updated_at=now,
            )
        )
        if written:
            return Outcome.COMPLETED
        transaction.set_rollback(True, using=db)  # undo "completed": nothing was stored
    message = "the question was deleted while its explanation was being written"
    return outcome_of(queue.fail(job, ErrorCode.QUESTION_MISSING, message))


async def run(job: StudyQuestionJob, ctx: WorkContext) -> Outcome:
    """Run one claimed explanation job; returns what became of it."""
    question = await ctx.db(_load, job, ctx.database)
    if question is None:
        return await fail_job(ctx, job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.text.strip():
        return await fail_job(ctx, job, ErrorCode.QUESTION_EMPTY, "the question has no text")
    try:
        messages = build_messages(question)
    except ValidationError as exc:
        # Stored data no form let through (raw SQL, an old import): no retry can fix it.
        message = f"the question's choices are invalid: {' '.join(exc.messages)}"
        return await fail_job(ctx, job, ErrorCode.QUESTION_INVALID, message)
    try:
        async with ctx.gate.slot():
            if ctx.stopping():
                # Claimed ahead, but the consumer is shutting down: give it back now
                # rather than start a call the grace period may cut short.
                return await release_job(ctx, job, message="consumer stopping")
            error = ctx.breaker.last_error
            if not ctx.breaker.allows() and error is not None:
                # The server failed while this job waited for the gate: do not knock again.
                return await release_job(
                    ctx, job, delay=ctx.breaker.remaining(), code=error.code, message=error.message
                )
            try:
                reply = await ctx.client.chat(messages)
            except LLMError as error:
                # Inside the gate: a job waiting for the slot must see the breaker open.
                return await handle_llm_error(ctx, job, error)
    except GateTimeout as exc:
        return await release_job(ctx, job, code=ErrorCode.LLM_OVERLOADED, message=str(exc))

    ctx.breaker.success()
    if reply.truncated:
        logger.warning(
            "study_job_truncated id=%s question=%s completion_tokens=%s",
            job.pk,
            question.pk,
            reply.completion_tokens,
        )
    return await ctx.db(_store, job, question.pk, reply, ctx.database)
