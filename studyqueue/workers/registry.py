"""Job kinds and their handlers: adding a kind is one line here (docs/howto/job-kind.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob
from studyqueue.queue import transitions as queue
from studyqueue.queue.transitions import Outcome
from studyqueue.workers import explanation
from studyqueue.workers.base import WorkContext

Handler = Callable[[StudyQuestionJob, WorkContext], Awaitable[Outcome]]

HANDLERS: dict[str, Handler] = {
    JobKind.EXPLANATION: explanation.run,
}

# Known kinds that are not built yet: their jobs are skipped at once, never left queued.
RESERVED: dict[str, str] = {
    JobKind.SESSION_SUMMARY: "session_summary is reserved and not implemented yet",
}


async def dispatch(job: StudyQuestionJob, ctx: WorkContext) -> Outcome:
    """Run a claimed job by its kind."""
    handler = HANDLERS.get(job.kind)
    if handler is not None:
        return await handler(job, ctx)
    if job.kind in RESERVED:
        code, message = ErrorCode.UNSUPPORTED_KIND, RESERVED[job.kind]
    else:
        code, message = ErrorCode.UNKNOWN_KIND, f"unknown kind {job.kind!r}"
    return await ctx.db(queue.skip_claimed, job, code, message)
