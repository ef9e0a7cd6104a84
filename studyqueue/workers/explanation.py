"""The explanation handler: build the prompt, ask the LLM through the gate, keep the answer
as a revision, check its quality (and the answer it states against the key), make it current
(or a candidate for a reviewer, when the current explanation was approved or edited)."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction

from studyqueue.conf import conf
from studyqueue.explanations import quality, revisions
from studyqueue.explanations.prompts import PromptVersion, build_messages, current_version
from studyqueue.models import ErrorCode, StudyQuestion, StudyQuestionJob
from studyqueue.queue import retry
from studyqueue.queue import transitions as queue
from studyqueue.queue.transitions import Outcome
from studyqueue.services.gate import GateTimeout
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.workers.base import (
    WorkContext,
    handle_gate_timeout,
    handle_llm_error,
    hold_back,
)

logger = logging.getLogger("studyqueue.worker")


def _load(job: StudyQuestionJob, db: str) -> StudyQuestion | None:
    if job.study_question_id is None:
        return None
    return StudyQuestion.objects.using(db).filter(pk=job.study_question_id).first()


def _quality_retry(job: StudyQuestionJob, flags: list[quality.QualityFlag]) -> str | None:
    """The flag that earns this job its one quality retry, if any."""
    wanted = [flag for flag in flags if flag in quality.flags_to_retry()]
    if not wanted or job.quality_retried or job.attempts >= job.max_attempts:
        return None
    return wanted[0]


def _question_changed(job: StudyQuestionJob, question: StudyQuestion) -> Outcome:
    """The question was edited (re-import, admin) during the call: the reply explains text
    it no longer has. Nothing is stored; the job runs again on the new content, free of an
    attempt while the policy allows (``retry.RetryStrategy.release_is_free``: the call
    reached the server; a question rewritten on every call still ends), then as a counted,
    transient failure."""
    logger.warning(
        "study_reply_dropped id=%s question=%s reason=question_changed free_releases=%s",
        job.pk,
        question.pk,
        job.free_releases,
    )
    message = "the question changed during the LLM call; its reply was dropped"
    if retry.strategy().release_is_free(free_releases=job.free_releases, reached_server=True):
        return queue.release(
            job, code=ErrorCode.QUESTION_CHANGED, message=message, reached_server=True
        )
    return queue.fail(job, ErrorCode.QUESTION_CHANGED, message)


def store(
    job: StudyQuestionJob,
    question: StudyQuestion,
    reply: LLMReply,
    version: PromptVersion,
    db: str,
) -> Outcome:
    """Keep the reply as a revision and, in the same transaction, either complete the job
    and make the revision current, or (a flag set to retry) run the job once more; fenced
    by the claim token and by the question's content (``question`` as the prompt saw it)."""
    # What the reply says the answer is, against the key the prompt gave (no other call).
    checked = quality.check(question, reply.content, reply.finish_reason)
    flags, stated = checked.flags, checked.stated
    retry_for = _quality_retry(job, flags)
    with transaction.atomic(using=db):
        # Locked until the commit: an edit waits, then finds the explanation stored (and an
        # import queues a new job); or it came first, and the content no longer matches.
        # NO KEY: inserting a job that refers to the question is not blocked. Its current
        # explanation's review comes in the same read (only the question is locked): a
        # reviewed one is not replaced (``revisions.settle``).
        now = (
            StudyQuestion.objects.using(db)
            .select_for_update(no_key=True, of=("self",))
            .select_related("current_revision")
            .only("text", "choices", "answer", "current_revision__review_status")
            .filter(pk=question.pk)
            .first()
        )
        if now is None:
            return _question_missing(job)
        if now.content_hash() != question.content_hash():
            return _question_changed(job, question)
        if retry_for is not None:
            # A cut reply gets room to finish; other flags retry as they were.
            doubled = (job.max_tokens or conf.LLM_MAX_TOKENS) * 2
            reason = f"retried once: the reply was flagged {retry_for}"
            max_tokens = doubled if retry_for == quality.TRUNCATED else None
            # Kept (not current); its attempt records the reply's tokens.
            flagged = revisions.add(job, question.pk, reply, version, flags, stated_answer=stated)
            outcome = queue.retry_for_quality(
                job, reason=reason, max_tokens=max_tokens, revision=flagged
            )
            if outcome is Outcome.LOST:
                transaction.set_rollback(True, using=db)  # the claim was lost: keep nothing
            return outcome
        # The revision holds the reply's metadata; the job points at it.
        revision = revisions.add(job, question.pk, reply, version, flags, stated_answer=stated)
        completed = queue.complete(job, revision=revision, llm_ms=reply.elapsed_ms)
        if completed is Outcome.LOST:
            transaction.set_rollback(True, using=db)  # the claim was lost: keep nothing
            return completed
        # Current, or a candidate when a reviewer approved or wrote the current one.
        if revisions.settle(revision, now.current_revision):
            if flags:
                logger.warning(
                    "study_explanation_flagged id=%s question=%s flags=%s",
                    job.pk,
                    question.pk,
                    ",".join(flags),
                )
            return completed
        transaction.set_rollback(True, using=db)  # undo "completed": nothing was stored
    return _question_missing(job)


def _question_missing(job: StudyQuestionJob) -> Outcome:
    message = "the question was deleted while its explanation was being written"
    return queue.fail(job, ErrorCode.QUESTION_MISSING, message)


async def run(job: StudyQuestionJob, ctx: WorkContext) -> Outcome:
    """Run one claimed explanation job; returns what became of it."""
    # Not on the jobs' connection: there it waited behind the previous job's store.
    question = await ctx.reader(_load, job, ctx.database)
    if question is None:
        return await ctx.db(queue.fail, job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.text.strip():
        return await ctx.db(queue.fail, job, ErrorCode.QUESTION_EMPTY, "the question has no text")
    try:
        messages = build_messages(question)
    except ValidationError as exc:
        # Stored data no form let through (raw SQL, an old import): no retry can fix it.
        message = f"the question's choices are invalid: {' '.join(exc.messages)}"
        return await ctx.db(queue.fail, job, ErrorCode.QUESTION_INVALID, message)
    version = current_version(max_tokens=job.max_tokens)
    try:
        async with ctx.gate.slot(prefix=version.hash) as slot:
            held_back = await hold_back(ctx, job)  # stopping, or its kind was paused
            if held_back is not None:
                return held_back
            error = ctx.breaker.last_error
            if not ctx.breaker.allows() and error is not None:
                # The server failed while this job waited for the gate: do not knock again.
                return await ctx.db(
                    queue.release,
                    job,
                    delay=ctx.breaker.remaining(),
                    code=error.code,
                    message=error.message,
                )
            try:
                reply = await ctx.client.chat(
                    messages,
                    max_tokens=job.max_tokens,
                    on_sent=lambda: ctx.gate.sent(slot),
                    on_first_token=lambda: ctx.gate.warmed(version.hash),
                )
            except LLMError as error:
                # Inside the gate: a job waiting for the slot must see the breaker open.
                return await handle_llm_error(ctx, job, error)
            ctx.gate.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)
    except GateTimeout as exc:
        return await handle_gate_timeout(ctx, job, exc)

    ctx.breaker.success()
    if reply.truncated:
        logger.warning(
            "study_job_truncated id=%s question=%s completion_tokens=%s",
            job.pk,
            question.pk,
            reply.completion_tokens,
        )
    return await ctx.db(store, job, question, reply, version, ctx.database)
