"""What every job handler shares: its context, and the mapping of a failed LLM call to a
transition (the rules come from ``studyqueue.queue.retry``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from studyqueue.models import ErrorCode, StudyQuestionJob
from studyqueue.queue import retry
from studyqueue.queue import transitions as queue
from studyqueue.queue.transitions import Outcome
from studyqueue.services.breaker import CircuitBreaker
from studyqueue.services.gate import GateTimeout, LLMGate, RunDB
from studyqueue.services.llm import LLMClient, LLMError

logger = logging.getLogger("studyqueue.worker")

Starting = Callable[[StudyQuestionJob], Awaitable[str | None]]


async def _always_start(job: StudyQuestionJob) -> str | None:
    return None


@dataclass
class WorkContext:
    """What a handler needs from its consumer; all of it lives as long as the consumer."""

    client: LLMClient
    breaker: CircuitBreaker
    gate: LLMGate
    db: RunDB  # ``await ctx.db(fn, *args)`` runs a sync function on the jobs' connection
    database: str  # the alias every query uses
    stopping: Callable[[], bool]
    # Right before a job's LLM call: a reason not to start it (its kind was paused since
    # the claim), or None; from then on the job counts as started (``hold_back``).
    starting: Starting = _always_start
    # ``await ctx.read(fn, *args)``: a job's reads before its call (its question), on a
    # connection its writes do not hold (the consumer's claims'), so that the next job's
    # read never queues behind the previous job's store; None: on ``db``.
    read: RunDB | None = None

    @property
    def reader(self) -> RunDB:
        """Where a job's reads before its call run: ``read``, else ``db``."""
        return self.read or self.db


async def hold_back(ctx: WorkContext, job: StudyQuestionJob) -> Outcome | None:
    """Call inside the gate, right before the LLM call: hand the job back (attempt kept)
    when the consumer is stopping or the job's kind was paused since its claim; None: the
    call may start."""
    if ctx.stopping():
        # Claimed ahead, but the consumer is shutting down: give it back now rather than
        # start a call the grace period may cut short.
        return await ctx.db(queue.release, job, message="consumer stopping")
    reason = await ctx.starting(job)
    if reason is not None:
        return await ctx.db(queue.release, job, message=reason)
    return None


async def handle_llm_error(ctx: WorkContext, job: StudyQuestionJob, error: LLMError) -> Outcome:
    """Map a failed LLM call to the job's transition.

    A failure of the server as a whole pauses claiming (the breaker) and hands the job
    back with its attempt while the policy says that is free
    (``retry.RetryStrategy.release_is_free``); everything else is a failed attempt.
    Called inside the gate: an overload tells the adaptive gate to back off.
    """
    if retry.is_loss_signal(error.code):
        ctx.gate.record_loss(error.code)
    if error.affects_all:
        pause = ctx.breaker.trip(error)
        free = retry.strategy().release_is_free(
            free_releases=job.free_releases, reached_server=error.reached_server
        )
        if free:
            return await ctx.db(
                queue.release,
                job,
                delay=pause,
                code=error.code,
                message=error.message,
                reached_server=error.reached_server,
            )
        logger.warning(
            "study_job_release_limit id=%s free_releases=%s error_code=%s",
            job.pk,
            job.free_releases,
            error.code,
        )
    return await ctx.db(queue.fail, job, error.code, error.message, retry_after=error.retry_after)


async def handle_gate_timeout(
    ctx: WorkContext, job: StudyQuestionJob, error: GateTimeout
) -> Outcome:
    """No gate slot within ``GATE_TIMEOUT_SECONDS``: hand the job back, bounded like any
    hand-back (``retry.RetryStrategy.gate_timeout_is_free``), then a counted failure
    (``llm_overloaded``: retried with backoff, and ``failed`` once its attempts are spent)."""
    message = str(error)
    if retry.strategy().gate_timeout_is_free(free_releases=job.free_releases):
        return await ctx.db(
            queue.release,
            job,
            code=ErrorCode.LLM_OVERLOADED,
            message=message,
            reached_server=True,  # counted in free_releases
        )
    logger.warning(
        "study_job_release_limit id=%s free_releases=%s error_code=%s reason=gate_timeout",
        job.pk,
        job.free_releases,
        ErrorCode.LLM_OVERLOADED,
    )
    return await ctx.db(queue.fail, job, ErrorCode.LLM_OVERLOADED, message)
