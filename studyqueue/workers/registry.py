"""Job kinds and their handlers, and what every handler shares. A handler is an async
``(job, ctx) -> JobResult`` registered with ``@handler(kind, …)`` with its kind's spec
(``models.KindSpec``); the consumer writes its result (docs/howto/job-kind.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from django.core.exceptions import ValidationError

from studyqueue.conf import conf
from studyqueue.models import (
    KIND_SPECS,
    ErrorCode,
    ExplanationRevision,
    KindSpec,
    StudyQuestion,
    StudyQuestionJob,
    register_kind,
)
from studyqueue.queue import retry
from studyqueue.queue.store import Failed, JobResult, JobStore, Released, Skipped
from studyqueue.services.gate import GateTimeout
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.services.pool import EndpointPool, Held, Member

logger = logging.getLogger("studyqueue.worker")


@dataclass
class WorkContext:
    """What a handler needs from its consumer; all of it lives as long as the consumer."""

    store: JobStore
    pool: EndpointPool  # the LLM servers, each with its client, gate and breaker
    stopping: Callable[[], bool]
    # Right before a job's LLM call: a reason not to start it (its kind paused), or None.
    starting: Callable[[StudyQuestionJob], Awaitable[str | None]]


Handler = Callable[[StudyQuestionJob, WorkContext], Awaitable[JobResult]]


def handler(kind: str, **spec: Any) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``kind``, with the rest of the kind's
    spec (``models.KindSpec``: its wait, priority, whether it is a delivery)."""

    def register(fn: Handler) -> Handler:
        register_kind(KindSpec(kind, fn, **spec))
        return fn

    return register


async def dispatch(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run a claimed job by its kind; what happened, for the consumer to write."""
    spec = KIND_SPECS.get(job.kind)
    if spec is not None:
        return await spec.handler(job, ctx)
    return Skipped(ErrorCode.UNKNOWN_KIND, f"unknown kind {job.kind!r}")


async def hold_back(ctx: WorkContext, job: StudyQuestionJob, member: Member) -> Released | None:
    """Right before the LLM call: the job handed back if the consumer stops, its kind was
    paused or ``member`` failed meanwhile; else None."""
    if ctx.stopping():
        # Rather than start a call the shutdown's grace period may cut short.
        return Released("consumer stopping")
    if (reason := await ctx.starting(job)) is not None:
        return Released(reason)
    breaker = member.breaker
    error = breaker.last_error
    if not breaker.allows() and error is not None:
        # The server failed while this job waited for the gate: do not knock again.
        # Logged at DEBUG: the breaker's line says the server is down.
        return Released(error.message, breaker.remaining(), error.code, level=logging.DEBUG)
    return None


def failed(job: StudyQuestionJob, code: str, message: str) -> Failed:
    """A failure the handler found itself, with the policy's decision for it."""
    return Failed.decided(job, retry.Failure(code, message))


async def question_to_check(job: StudyQuestionJob, ctx: WorkContext) -> StudyQuestion | Failed:
    """A check's question, or the job's failure: deleted, or no text, choices or key."""
    question = await ctx.store.question(job)
    if question is None:
        return failed(job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.checkable():
        return failed(job, ErrorCode.QUESTION_INVALID, "the question has no choices or no key")
    return question


Prepare = Callable[[StudyQuestion, ExplanationRevision], list[dict[str, str]] | JobResult]


async def ask_check(
    job: StudyQuestionJob,
    ctx: WorkContext,
    prepare: Prepare,
    *,
    prefix: str,
    max_tokens: int,
    step_check: bool = False,
) -> tuple[StudyQuestion, ExplanationRevision, LLMReply] | JobResult:
    """A check's question, revision (``revision_to_verify``) and the model's reply at
    temperature 0 to the messages ``prepare`` builds of them; or the job's end: failed as
    ``question_to_check`` or for invalid choices, skipped with its kind's setting off
    (``after_explanation``) or nothing left to check, what ``prepare`` returned instead of
    messages, or what became of the call."""
    question = await question_to_check(job, ctx)
    if not isinstance(question, StudyQuestion):
        return question
    if not getattr(conf, setting := KIND_SPECS[job.kind].after_explanation):
        return Skipped(ErrorCode.NOTHING_TO_VERIFY, f"{setting} is off")
    revision = await ctx.store.revision_to_verify(question, step_check=step_check)
    if revision is None:
        # Checked already, replaced by a reviewer's correction, or outdated: nothing to do.
        return Skipped(ErrorCode.NOTHING_TO_VERIFY, f"no explanation left to check ({job.kind})")
    try:
        # In a thread: a reply may be megabytes (LLM_MAX_REPLY_BYTES), and reading it all
        # must not hold up the other jobs of this event loop.
        messages = await asyncio.to_thread(prepare, question, revision)
    except ValidationError as exc:
        return invalid_choices(job, exc)
    if not isinstance(messages, list):
        return messages
    reply = await ask(ctx, job, messages, prefix=prefix, max_tokens=max_tokens, temperature=0.0)
    return (question, revision, reply) if isinstance(reply, LLMReply) else reply


def invalid_choices(job: StudyQuestionJob, error: ValidationError) -> Failed:
    """A check whose prompt could not be built: the question's choices are invalid."""
    message = f"the question's choices are invalid: {' '.join(error.messages)}"
    return failed(job, ErrorCode.QUESTION_INVALID, message)


def llm_failed(member: Member, job: StudyQuestionJob, error: LLMError) -> Failed:
    """A failed LLM call to ``member`` and the policy's decision; call it inside the gate."""
    if error.code in retry.LOSS_SIGNALS:
        member.gate.record_loss(error.code)
    if error.code == ErrorCode.LLM_EMPTY:
        member.answered_empty(error)  # repeated, it opens the breaker: the pool goes elsewhere
    failure = retry.Failure(
        error.code,
        error.message,
        reached_server=error.reached_server,
        affects_all=error.affects_all,
        retry_after=error.retry_after,
    )
    failed = Failed.decided(job, failure)
    if failed.decision.pause_server:
        pause = member.breaker.trip(error)
        if failed.decision.action is retry.Action.RELEASE:  # back once the breaker closes
            return replace(failed, decision=replace(failed.decision, delay=pause))
    return failed


R = TypeVar("R")
# Failures that may be the server's, not the job's (with ``affects_all``): another may answer.
_SERVERS_FAULTS = {*retry.LOSS_SIGNALS, ErrorCode.LLM_EMPTY}


async def on_endpoint(
    ctx: WorkContext, job: StudyQuestionJob, work: Callable[[Held], Awaitable[R]], *, prefix: str
) -> R | JobResult:
    """Run ``work`` (the job's LLM calls) with a gate slot: what it returned, or what became
    of the job instead. A server that fails, or answers empty, is left for another one."""
    tried: list[Member] = []
    while True:
        try:
            async with ctx.pool.slot(prefix=prefix, avoid=tried) as held:
                member = held.member
                if not member.breaker.allows() and ctx.pool.other_available([*tried, member]):
                    tried.append(member)  # it failed while this job waited: go elsewhere
                    continue
                if (held_back := await hold_back(ctx, job, member)) is not None:
                    return held_back  # stopping, paused, failed
                try:
                    result = await work(held)
                except LLMError as error:
                    # Inside the gate: a job waiting for the slot must see the breaker open.
                    outcome = llm_failed(member, job, error)
                    tried.append(member)
                    servers_fault = error.affects_all or error.code in _SERVERS_FAULTS
                    if servers_fault and ctx.pool.other_available(tried):
                        logger.info(
                            "study_llm_failover id=%s from=%s error_code=%s",
                            job.pk,
                            member.name,
                            error.code,
                        )
                        continue
                    return outcome
        except GateTimeout as exc:
            # Not the job's fault: handed back while the policy allows, then counted.
            failure = retry.Failure(ErrorCode.LLM_OVERLOADED, str(exc), job_at_fault=False)
            return Failed.decided(job, failure)
        member.succeeded()
        return result


async def ask(
    ctx: WorkContext,
    job: StudyQuestionJob,
    messages: list[dict[str, str]],
    *,
    prefix: str,
    **options: Any,
) -> LLMReply | JobResult:
    """One LLM call for ``job`` (``options``: ``LLMClient.chat``'s), as ``on_endpoint``."""
    return await on_endpoint(ctx, job, lambda held: held.chat(messages, **options), prefix=prefix)
