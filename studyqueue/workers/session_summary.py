"""The session summary handler: once the explanations of the questions its learner missed
are written (the claim waits for them: ``WAIT``), ask the LLM for the summary,
check what it states and return it to be kept (``summaries.Written``)."""

from __future__ import annotations

from studyqueue.explanations import next_step
from studyqueue.models import ErrorCode, JobKind, SessionAnswer, StudyQuestionJob, StudySession
from studyqueue.queue import retry, sql
from studyqueue.queue.store import Failed, JobResult
from studyqueue.services.llm import LLMReply
from studyqueue.sessions import figures, summaries
from studyqueue.workers.registry import WorkContext, ask, failed, handler


def _load(
    job: StudyQuestionJob,
) -> tuple[StudySession, list[SessionAnswer], list[int], dict] | None:
    session = StudySession.objects.filter(jobs=job).first()
    if session is None:
        return None
    answers = summaries.answers_of(session)
    needed = summaries.needed(answers)
    if needed:
        if job.attempts < job.max_attempts:  # the last attempt fails instead
            next_step.queue_jobs(needed)
        return session, answers, needed, {}
    return session, answers, needed, figures.of(session, summaries.scored(answers))


# A summary waits while an explanation of a question its learner missed will still run (not
# for a disputed key's: the summary names it under review).
WAIT = f"""EXISTS (
        SELECT 1 FROM studyqueue_studyquestionjob AS needed
        JOIN studyqueue_sessionanswer AS missed
          ON missed.question_id = needed.study_question_id
        JOIN studyqueue_studyquestion AS asked ON asked.id = needed.study_question_id
        WHERE missed.session_id = job.study_session_id AND NOT missed.correct
          AND NOT ({sql.awaiting_key_check("asked")})
          AND needed.kind = 'explanation' AND {sql.active("needed")}
      )"""


# After every explanation ready (priority 1): the summary draws on them.
@handler(JobKind.SESSION_SUMMARY, wait=WAIT, priority=1)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed summary job; what happened, for the consumer to write."""
    found = await ctx.store.on_claims(_load, job)
    if found is None:
        return failed(job, ErrorCode.SESSION_MISSING, "the study session was deleted")
    session, answers, needed, numbers = found
    if needed:
        # Never written from nothing: their explanation jobs are queued, and the next claim
        # waits for them. Counted, so that explanations that keep failing end the summary.
        ids = ", ".join(str(pk) for pk in needed)
        message = f"waits for the explanations of questions {ids}"
        failure = retry.Failure(ErrorCode.EXPLANATIONS_NEEDED, message, waits=True)
        return Failed.decided(job, failure)
    version = summaries.version()
    messages = summaries.messages(session, answers, numbers)
    reply = await ask(ctx, job, messages, prefix=version.hash, max_tokens=job.max_tokens)
    if not isinstance(reply, LLMReply):
        return reply  # handed back, or the call failed
    checked = summaries.check(reply.content, answers, numbers)
    return summaries.Written(session, reply, checked, numbers)
