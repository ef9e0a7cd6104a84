"""The session notice handler: a session's summary was written; POST it, signed, to
``WEBHOOK_URL`` like a set's notice (``workers.set_notice``), with one idempotency key per
summary, then complete the job. No LLM call, no gate slot."""

from __future__ import annotations

import logging

from studyqueue.conf import conf
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob, StudySession
from studyqueue.queue import transitions as queue
from studyqueue.queue.store import JobResult
from studyqueue.sessions import summaries
from studyqueue.workers.registry import WorkContext, failed, handler
from studyqueue.workers.set_notice import post

logger = logging.getLogger("studyqueue.sessions")


def _payload(job: StudyQuestionJob) -> tuple[dict[str, object], str] | None:
    if job.study_session_id is None:
        return None
    sessions = summaries.with_state(StudySession.objects.all())
    session = sessions.filter(pk=job.study_session_id).first()
    if session is None or session.summary is None:
        return None
    data = {"event": "session.summarized", **summaries.as_json(session)}
    return data, f"session-{session.pk}-summary-{session.summary.pk}"


class Completed:
    """The notice went out (or had nowhere to go): the job completes."""

    def write(self, job: StudyQuestionJob) -> queue.Outcome:
        return queue.complete(job)


@handler(JobKind.SESSION_NOTICE)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed session notice job; what happened, for the consumer to write."""
    found = await ctx.store.on_claims(_payload, job)
    if found is None:
        return failed(job, ErrorCode.SESSION_MISSING, "the session or its summary was deleted")
    data, key = found
    url = conf.WEBHOOK_URL
    if url:
        error = await post(url, data, key)
        if error is not None:
            return failed(job, ErrorCode.WEBHOOK_FAILED, error)
    logger.info("study_session_noticed session=%s webhook=%s", job.study_session_id, bool(url))
    return Completed()
