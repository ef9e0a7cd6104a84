"""What every job handler shares: its context, its outcomes, and the failure mapping."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from studyqueue import queue
from studyqueue.models import JobStatus, StudyQuestionJob
from studyqueue.services.breaker import CircuitBreaker
from studyqueue.services.gate import LLMGate
from studyqueue.services.llm import LLMClient, LLMError

logger = logging.getLogger("studyqueue.worker")

# A job may be handed back this many times in a row after its call reached the LLM
# server (which then failed as a whole) without counting its attempt; the next such
# failure counts. So a job makes at most (MAX_FREE_RELEASES + 1) x max_attempts calls,
# whatever a server does. A server that refuses connections is down: those calls never
# reached it, and their releases are free.
MAX_FREE_RELEASES = 2


class Outcome(StrEnum):
    """What became of a claimed job."""

    COMPLETED = "completed"  # done, result stored
    RETRYING = "retrying"  # failed this attempt; pending again after a backoff
    FAILED = "failed"  # failed for good
    SKIPPED = "skipped"  # not run (reserved or unknown kind)
    RELEASED = "released"  # handed back without counting the attempt
    LOST = "lost"  # the claim was taken from us (stale reset, operator): nothing written


RunDB = Callable[..., Awaitable[Any]]
Starting = Callable[[StudyQuestionJob], Awaitable[str | None]]


async def _always_start(job: StudyQuestionJob) -> str | None:
    return None


@dataclass
class WorkContext:
    """What a handler needs from its consumer; all of it lives as long as the consumer."""

    client: LLMClient
    breaker: CircuitBreaker
    gate: LLMGate
    db: RunDB  # ``await ctx.db(fn, *args)`` runs a sync function on the database thread
    database: str  # the alias every query uses
    stopping: Callable[[], bool]
    # Right before a job's LLM call: a reason not to start it (its kind was paused since
    # the claim), or None; from then on the job counts as started (``hold_back``).
    starting: Starting = _always_start


def outcome_of(status: JobStatus | None) -> Outcome:
    """The outcome of ``queue.fail``'s answer (its new status, or None if not ours)."""
    if status is None:
        return Outcome.LOST
    return Outcome.RETRYING if status == JobStatus.PENDING else Outcome.FAILED


async def fail_job(
    ctx: WorkContext,
    job: StudyQuestionJob,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
) -> Outcome:
    """Record a failed attempt (``queue.fail``)."""
    return outcome_of(await ctx.db(queue.fail, job, code, message, retry_after=retry_after))


async def release_job(
    ctx: WorkContext,
    job: StudyQuestionJob,
    *,
    delay: float = 0.0,
    code: str = "",
    message: str = "",
    reached_server: bool = False,
) -> Outcome:
    """Hand a job back without counting its attempt (``queue.release``)."""
    applied = await ctx.db(
        queue.release, job, delay=delay, code=code, message=message, reached_server=reached_server
    )
    return Outcome.RELEASED if applied else Outcome.LOST


async def hold_back(ctx: WorkContext, job: StudyQuestionJob) -> Outcome | None:
    """Call inside the gate, right before the LLM call: hand the job back (attempt kept)
    when the consumer is stopping or the job's kind was paused since its claim; None: the
    call may start."""
    if ctx.stopping():
        # Claimed ahead, but the consumer is shutting down: give it back now rather than
        # start a call the grace period may cut short.
        return await release_job(ctx, job, message="consumer stopping")
    reason = await ctx.starting(job)
    if reason is not None:
        return await release_job(ctx, job, message=reason)
    return None


async def handle_llm_error(ctx: WorkContext, job: StudyQuestionJob, error: LLMError) -> Outcome:
    """Map a failed LLM call to the job's outcome.

    A failure of the server as a whole pauses claiming (the breaker) and hands the job
    back with its attempt, at most ``MAX_FREE_RELEASES`` times in a row for calls that
    reached the server; everything else is a failed attempt.
    """
    if error.affects_all:
        pause = ctx.breaker.trip(error)
        if not error.reached_server or job.free_releases < MAX_FREE_RELEASES:
            return await release_job(
                ctx,
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
    return await fail_job(ctx, job, error.code, error.message, retry_after=error.retry_after)
