"""run_explanation_job: build the prompt, ask the LLM through the gate, store the answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from studyqueue import queue
from studyqueue.breaker import CircuitBreaker
from studyqueue.conf import conf
from studyqueue.models import ErrorCode, StudyQuestion, StudyQuestionJob
from studyqueue.services.llm import CUT_OFF_BY_OUTAGE, LLMClient, LLMError, LLMReply
from studyqueue.services.mlx_gate import GateTimeout, MLXGate

logger = logging.getLogger("studyqueue.worker")

SYSTEM_TEMPLATE = "studyqueue/explanation_system.txt"


@dataclass
class WorkContext:
    """What a worker needs from its cycle: the LLM client, the gate and the breaker."""

    client: LLMClient
    breaker: CircuitBreaker
    gate_permits: int = 1
    gate_timeout: float = 600.0
    stopping: Callable[[], bool] = lambda: False

    def gate(self) -> MLXGate:
        return MLXGate(self.client.base_url, permits=self.gate_permits, timeout=self.gate_timeout)


def build_messages(question: StudyQuestion) -> list[dict[str, str]]:
    """The chat messages for a question, from the prompt templates."""
    context = {"question": question, "choices": [str(c) for c in (question.choices or [])]}
    return [
        {"role": "system", "content": render_to_string(SYSTEM_TEMPLATE).strip()},
        {"role": "user", "content": render_to_string(conf.PROMPT_TEMPLATE, context).strip()},
    ]


def _store(job: StudyQuestionJob, question_id: int, reply: LLMReply) -> bool:
    """Complete the job and write the explanation in one transaction; fenced."""
    with transaction.atomic():
        if not queue.complete(
            job,
            llm_model=reply.model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            llm_ms=reply.elapsed_ms,
        ):
            return False
        StudyQuestion.objects.filter(pk=question_id).update(
            explanation=reply.content,
            explanation_model=reply.model,
            explanation_truncated=reply.truncated,
            explained_at=timezone.now(),
            updated_at=timezone.now(),
        )
        return True


async def record_failure(
    job: StudyQuestionJob, code: str, message: str, *, retry_after: float | None = None
) -> str:
    """Fail a claimed job (``queue.fail``); its new status, or ``lost`` if the claim was."""
    status = await queue.afail(job, code, message, retry_after=retry_after)
    return "lost" if status is None else str(status)


def _cut_off_again(job: StudyQuestionJob, error: LLMError) -> bool:
    """This job's call was cut off by the server going away, and so was its last one:
    the question itself may be what brings the server down."""
    return (
        error.cut_off
        and job.error_code == ErrorCode.LLM_UNAVAILABLE
        and job.error_message.startswith(CUT_OFF_BY_OUTAGE)
    )


async def _handle_llm_error(job: StudyQuestionJob, error: LLMError, ctx: WorkContext) -> str:
    if error.affects_all:
        # The server as a whole is failing: pause claiming.
        pause = ctx.breaker.trip(error)
        if not _cut_off_again(job, error):
            # Not this job's fault: give it back with its attempt.
            await queue.arelease(job, delay=pause, code=error.code, message=error.message)
            return "released"
        # Counted, and retried after the usual backoff.
        error = LLMError(ErrorCode.LLM_SERVER_ERROR, f"cut off twice in a row: {error.message}")
    return await record_failure(job, error.code, error.message, retry_after=error.retry_after)


async def run_explanation_job(job: StudyQuestionJob, ctx: WorkContext) -> str:
    """Run one claimed explanation job; returns what became of it.

    One of ``completed``, ``pending`` (retry later), ``failed``, ``released`` (back
    without losing an attempt) or ``lost`` (the claim was taken from us; nothing written).
    """
    # Loaded here, not with the claim: with the cycle's pipelining this runs while the
    # previous job's LLM call is still going, off the critical path.
    question = None
    if job.study_question_id is not None:
        question = await StudyQuestion.objects.filter(pk=job.study_question_id).afirst()
    if question is None:
        return await record_failure(job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.text.strip():
        return await record_failure(job, ErrorCode.QUESTION_EMPTY, "the question has no text")

    messages = build_messages(question)
    try:
        async with ctx.gate():
            if ctx.stopping():
                # Claimed ahead, but the consumer is shutting down: give it back now
                # rather than start a call the grace period may cut short.
                await queue.arelease(job, delay=0, message="consumer stopping")
                return "released"
            paused = ctx.breaker.remaining()
            if paused and ctx.breaker.last_error is not None:
                # The server failed while this job waited for the gate: do not knock again.
                error = ctx.breaker.last_error
                await queue.arelease(job, delay=paused, code=error.code, message=error.message)
                return "released"
            reply = await ctx.client.chat(messages)
    except GateTimeout as exc:
        await queue.arelease(job, delay=0, code=ErrorCode.LLM_OVERLOADED, message=str(exc))
        return "released"
    except LLMError as error:
        return await _handle_llm_error(job, error, ctx)

    ctx.breaker.success()
    # The gate just went to the next job on this loop: let it put its request on the
    # wire before this job's database write competes with it for the interpreter.
    # (Measured: halves the LLM server's idle time between two calls.)
    await asyncio.sleep(0)
    if reply.truncated:
        logger.warning(
            "study_job_truncated id=%s question=%s completion_tokens=%s",
            job.pk,
            question.pk,
            reply.completion_tokens,
        )
    stored = await sync_to_async(_store, thread_sensitive=True)(job, question.pk, reply)
    return "completed" if stored else "lost"
