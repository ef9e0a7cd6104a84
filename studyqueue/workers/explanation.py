"""The explanation handler: build the prompt, ask the LLM through the gate, check the reply
and return it to be kept as a revision (``revisions.Written``)."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError

from studyqueue.conf import conf
from studyqueue.explanations import revisions
from studyqueue.explanations.prompts import build_messages, current_version
from studyqueue.explanations.revisions import Written
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob
from studyqueue.queue import retry, sql
from studyqueue.queue.store import JobResult
from studyqueue.services.llm import LLMReply
from studyqueue.workers.registry import WorkContext, ask, failed, handler, invalid_choices

logger = logging.getLogger("studyqueue.worker")


# An explanation waits while its question's key audit will still run (one not paused), and,
# with KEY_AUDIT_HOLDS, while its key is disputed and no reviewer checked it.
WAIT = f"""EXISTS (
        SELECT 1 FROM studyqueue_studyquestionjob AS audit
        WHERE audit.study_question_id = job.study_question_id AND audit.kind = 'key_audit'
          AND (audit.status = 'processing'
               OR (audit.status = 'pending' AND audit.attempts < audit.max_attempts
                   AND NOT EXISTS (
                     SELECT 1 FROM studyqueue_queuepause AS audit_pause
                     WHERE audit_pause.kind = 'key_audit')))
      )
      OR (%(holds)s AND EXISTS (
        SELECT 1 FROM studyqueue_studyquestion AS held
        WHERE held.id = job.study_question_id AND {sql.awaiting_key_check("held")}
      ))"""


@handler(JobKind.EXPLANATION, wait=WAIT)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed explanation job; what happened, for the consumer to write."""
    question = await ctx.store.question(job)
    if question is None:
        return failed(job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.text.strip():
        return failed(job, ErrorCode.QUESTION_EMPTY, "the question has no text")
    try:
        messages = build_messages(question)
    except ValidationError as exc:
        # Stored data no form let through (raw SQL, an old import): no retry can fix it.
        return invalid_choices(job, exc)
    version = current_version(max_tokens=job.max_tokens)
    reply = await ask(ctx, job, messages, prefix=version.hash, max_tokens=job.max_tokens)
    if not isinstance(reply, LLMReply):
        return reply  # handed back, or the call failed
    if reply.truncated:
        logger.warning(
            "study_job_truncated id=%s question=%s completion_tokens=%s",
            job.pk,
            question.pk,
            reply.completion_tokens,
        )
    # What the reply says the answer is, against the key the prompt gave (no other call).
    checked = revisions.check(question, reply.content, reply.finish_reason)
    retried, _unknown = revisions.parse_flags(conf.QUALITY_RETRY)  # the check warns of those
    retryable = [flag for flag in checked.flags if flag in retried]
    retry_flag, max_tokens = "", job.max_tokens
    if retryable:
        decision = retry.decide(retry.Failure(flagged=retryable[0]), job)
        if decision.action is retry.Action.RETRY:
            retry_flag = retryable[0]
            if retry_flag == revisions.TRUNCATED:  # a cut reply gets room to finish
                max_tokens = (job.max_tokens or conf.LLM_MAX_TOKENS) * 2
    return Written(
        question,
        reply,
        version,
        list(checked.flags),
        checked.stated,
        retry_flag=retry_flag,
        max_tokens=max_tokens,
    )
