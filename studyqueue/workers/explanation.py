"""The explanation handler: build the prompt, ask the LLM through the gate, keep the answer
as a revision, check its quality, make it current."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction

from studyqueue import quality, queue, revisions
from studyqueue.conf import conf
from studyqueue.models import ErrorCode, StudyQuestion, StudyQuestionJob
from studyqueue.prompts import PromptVersion, build_messages, current_version
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.services.mlx_gate import GateTimeout
from studyqueue.workers.base import (
    Outcome,
    WorkContext,
    fail_job,
    handle_llm_error,
    hold_back,
    outcome_of,
    release_job,
)

logger = logging.getLogger("studyqueue.worker")


def _load(job: StudyQuestionJob, db: str) -> StudyQuestion | None:
    if job.study_question_id is None:
        return None
    return StudyQuestion.objects.using(db).filter(pk=job.study_question_id).first()


def _quality_retry(job: StudyQuestionJob, flags: list[str]) -> str | None:
    """The flag that earns this job its one quality retry, if any."""
    wanted = [flag for flag in flags if flag in quality.flags_to_retry()]
    if not wanted or job.quality_retried or job.attempts >= job.max_attempts:
        return None
    return wanted[0]


def store(
    job: StudyQuestionJob,
    question: StudyQuestion,
    reply: LLMReply,
    version: PromptVersion,
    db: str,
) -> Outcome:
    """Keep the reply as a revision and, in the same transaction, either complete the job
    and make the revision current, or (a flag set to retry) run the job once more; fenced."""
    flags = quality.flags_for(question.text, reply.content, reply.finish_reason)
    retry_for = _quality_retry(job, flags)
    with transaction.atomic(using=db):
        if retry_for is not None:
            # A cut reply gets room to finish; other flags retry as they were.
            doubled = (job.max_tokens or conf.LLM_MAX_TOKENS) * 2
            reason = f"retried once: the reply was flagged {retry_for}"
            max_tokens = doubled if retry_for == quality.TRUNCATED else None
            if not queue.retry_for_quality(job, reason=reason, max_tokens=max_tokens):
                return Outcome.LOST
            revisions.add(job, question.pk, reply, version, flags)  # kept, not current
            return Outcome.RETRYING
        if not queue.complete(
            job,
            llm_model=reply.model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            llm_ms=reply.elapsed_ms,
            first_token_ms=reply.first_token_ms,
            tokens_per_second=reply.tokens_per_second,
            prompt_version=version.hash,
        ):
            return Outcome.LOST
        revision = revisions.add(job, question.pk, reply, version, flags)
        if revisions.make_current(revision):
            if flags:
                logger.warning(
                    "study_explanation_flagged id=%s question=%s flags=%s",
                    job.pk,
                    question.pk,
                    ",".join(flags),
                )
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
    version = current_version(max_tokens=job.max_tokens)
    try:
        async with ctx.gate.slot():
            held_back = await hold_back(ctx, job)  # stopping, or its kind was paused
            if held_back is not None:
                return held_back
            error = ctx.breaker.last_error
            if not ctx.breaker.allows() and error is not None:
                # The server failed while this job waited for the gate: do not knock again.
                return await release_job(
                    ctx, job, delay=ctx.breaker.remaining(), code=error.code, message=error.message
                )
            try:
                reply = await ctx.client.chat(messages, max_tokens=job.max_tokens)
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
    return await ctx.db(store, job, question, reply, version, ctx.database)
