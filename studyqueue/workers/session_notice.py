"""The session notice handler: a session's summary was written; POST its current one,
signed, to ``WEBHOOK_URL`` like a set's notice (``workers.set_notice``), with one idempotency
key per summary, then complete the job (``Completed``: and queue the notice of a summary made
current meanwhile). No LLM call, no gate slot."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from studyqueue.conf import conf
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob, StudySession
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue_for_session
from studyqueue.queue.store import Fenced, JobResult
from studyqueue.sessions import summaries
from studyqueue.workers.registry import WorkContext, failed, handler
from studyqueue.workers.set_notice import post

logger = logging.getLogger("studyqueue.sessions")


def _payload(job: StudyQuestionJob) -> tuple[dict[str, object], int, int] | None:
    session = summaries.with_state(StudySession.objects.filter(jobs=job)).first()
    if session is None or session.summary is None:
        return None
    data = {"event": "session.summarized", **summaries.as_json(session)}
    return data, session.pk, session.summary.pk


@dataclass(frozen=True)
class Completed(Fenced):
    """The notice of summary ``sent`` went out (or had nowhere to go): the job completes. A
    summary made current since found this job active and queued no notice (one active job a
    session): if the session's current summary is another, its notice is queued here. The
    session's row lock orders this with ``summaries.make_current``: either that commit is
    seen here, or its enqueue comes after this job ended and queues the notice itself."""

    session_id: int
    sent: int

    def writes(self, job: StudyQuestionJob) -> transitions.Outcome:
        sessions = StudySession.objects.select_for_update().filter(pk=self.session_id)
        current = sessions.values_list("summary_id", flat=True).first()
        outcome = transitions.complete(job)
        if outcome is transitions.Outcome.COMPLETED and current not in (None, self.sent):
            enqueue_for_session(self.session_id, JobKind.SESSION_NOTICE)
        return outcome


@handler(JobKind.SESSION_NOTICE, priority=1, delivery=True)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed session notice job; what happened, for the consumer to write."""
    found = await ctx.store.on_claims(_payload, job)
    if found is None:
        return failed(job, ErrorCode.SESSION_MISSING, "the session or its summary was deleted")
    data, session_id, summary_id = found
    url, key = conf.WEBHOOK_URL, f"session-{session_id}-summary-{summary_id}"
    if url and (error := await post(url, data, key)) is not None:
        return failed(job, ErrorCode.WEBHOOK_FAILED, error)
    logger.info("study_session_noticed session=%s webhook=%s", job.study_session_id, bool(url))
    return Completed(session_id, summary_id)
