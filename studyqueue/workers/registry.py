"""Job kinds and their handlers, and what every handler shares.

A handler is an async function ``(job, ctx) -> JobResult``: it reads what it needs through
``ctx.store``, calls the LLM through ``ctx.gate`` and ``ctx.client``, and returns what
happened; the consumer writes it (``JobStore.finish``). A kind is added by decorating its
handler with ``@handler(kind)`` in a module that ``studyqueue/workers/__init__.py`` imports
(docs/howto/job-kind.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob
from studyqueue.queue import retry
from studyqueue.queue.store import Failed, JobResult, JobStore, Released, Skipped
from studyqueue.services.gate import CircuitBreaker, GateTimeout, LLMGate
from studyqueue.services.llm import LLMClient, LLMError, LLMReply

logger = logging.getLogger("studyqueue.worker")

Starting = Callable[[StudyQuestionJob], Awaitable[str | None]]


async def _always_start(job: StudyQuestionJob) -> str | None:
    return None


@dataclass
class WorkContext:
    """What a handler needs from its consumer; all of it lives as long as the consumer."""

    store: JobStore
    client: LLMClient
    breaker: CircuitBreaker
    gate: LLMGate
    stopping: Callable[[], bool]
    # Right before a job's LLM call: a reason not to start it (its kind was paused since
    # the claim), or None; from then on the job counts as started (``hold_back``).
    starting: Starting = _always_start


Handler = Callable[[StudyQuestionJob, WorkContext], Awaitable[JobResult]]

HANDLERS: dict[str, Handler] = {}

# Known kinds that are not built yet: their jobs are skipped at once, never left queued.
RESERVED: dict[str, str] = {
    JobKind.SESSION_SUMMARY: "session_summary is reserved and not implemented yet",
}


def handler(kind: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``kind``."""

    def register(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn

    return register


async def dispatch(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run a claimed job by its kind; what happened, for the consumer to write."""
    run = HANDLERS.get(job.kind)
    if run is not None:
        return await run(job, ctx)
    if job.kind in RESERVED:
        return Skipped(ErrorCode.UNSUPPORTED_KIND, RESERVED[job.kind])
    return Skipped(ErrorCode.UNKNOWN_KIND, f"unknown kind {job.kind!r}")


async def hold_back(ctx: WorkContext, job: StudyQuestionJob) -> Released | None:
    """Call inside the gate, right before the LLM call: hand the job back (attempt kept)
    when the consumer is stopping or the job's kind was paused since its claim, or when the
    server failed while it waited for the gate; None: the call may start."""
    if ctx.stopping():
        # Claimed ahead, but the consumer is shutting down: give it back now rather than
        # start a call the grace period may cut short.
        return Released("consumer stopping")
    reason = await ctx.starting(job)
    if reason is not None:
        return Released(reason)
    error = ctx.breaker.last_error
    if not ctx.breaker.allows() and error is not None:
        # The server failed while this job waited for the gate: do not knock again.
        return Released(error.message, delay=ctx.breaker.remaining(), code=error.code)
    return None


def failed(job: StudyQuestionJob, code: str, message: str) -> Failed:
    """A failure the handler found itself (a deleted or unusable question), with the
    policy's decision for it."""
    return Failed.decided(job, retry.Failure(code, message))


def llm_failed(ctx: WorkContext, job: StudyQuestionJob, error: LLMError) -> Failed:
    """A failed LLM call and the policy's decision for it (``retry.decide``). Called inside
    the gate: an overload tells the adaptive gate to back off, and a failure of the server
    as a whole opens the breaker before the next job waiting for the slot looks at it."""
    if retry.is_loss_signal(error.code):
        ctx.gate.record_loss(error.code)
    failure = retry.Failure(
        error.code,
        error.message,
        reached_server=error.reached_server,
        affects_all=error.affects_all,
        retry_after=error.retry_after,
    )
    failed = Failed.decided(job, failure)
    if failed.decision.pause_server:
        pause = ctx.breaker.trip(error)
        if failed.decision.action is retry.Action.RELEASE:
            return Failed(failure, retry.Decision(retry.Action.RELEASE, pause, True))
    return failed


async def ask(
    ctx: WorkContext,
    job: StudyQuestionJob,
    messages: list[dict[str, str]],
    *,
    prefix: str,
    **options: Any,
) -> LLMReply | JobResult:
    """One LLM call for ``job`` through the gate (``prefix``: the prompt's fixed part, for
    the gate's warm-first): the reply, or what became of the job instead (handed back before
    the call, a failed call, no slot in time). ``options`` go to ``LLMClient.chat``."""
    try:
        async with ctx.gate.slot(prefix=prefix) as slot:
            held_back = await hold_back(ctx, job)  # stopping, paused, the server failed
            if held_back is not None:
                return held_back
            try:
                reply = await ctx.client.chat(
                    messages,
                    on_sent=lambda: ctx.gate.sent(slot),
                    on_first_token=lambda: ctx.gate.warmed(prefix),
                    **options,
                )
            except LLMError as error:
                # Inside the gate: a job waiting for the slot must see the breaker open.
                return llm_failed(ctx, job, error)
            ctx.gate.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)
    except GateTimeout as exc:
        return gate_timed_out(job, exc)
    ctx.breaker.success()
    return reply


def gate_timed_out(job: StudyQuestionJob, error: GateTimeout) -> Failed:
    """No gate slot within ``GATE_TIMEOUT_SECONDS``: not the job's fault, so handed back
    while the policy allows, then a counted ``llm_overloaded`` failure."""
    failure = retry.Failure(ErrorCode.LLM_OVERLOADED, str(error), job_at_fault=False)
    return Failed.decided(job, failure)
