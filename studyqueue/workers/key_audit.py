"""The key audit handler: ask the model for the answer alone, ``KEY_AUDIT_SAMPLES`` times,
through the gate, and return the samples to be judged against the key and kept
(``key_audit.Audited``). The prompt never holds the key (``key_audit.build_messages``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from studyqueue.conf import conf
from studyqueue.explanations import answers, key_audit
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob
from studyqueue.queue.store import JobResult
from studyqueue.queue.transitions import Usage
from studyqueue.services.gate import GateTimeout
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.workers.registry import (
    WorkContext,
    failed,
    gate_timed_out,
    handler,
    hold_back,
    llm_failed,
)


@handler(JobKind.KEY_AUDIT)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed key audit job; what happened, for the consumer to write."""
    question = await ctx.store.question(job)
    if question is None:
        return failed(job, ErrorCode.QUESTION_MISSING, "the question was deleted")
    if not question.checkable():
        return failed(job, ErrorCode.QUESTION_INVALID, "the question has no choices or no key")
    try:
        messages = key_audit.build_messages(question)
    except ValidationError as exc:
        message = f"the question's choices are invalid: {' '.join(exc.messages)}"
        return failed(job, ErrorCode.QUESTION_INVALID, message)
    key = answers.key_choice(question.answer, question.choices)
    samples: list[key_audit.Sample] = []
    replies: list[LLMReply] = []
    elapsed_ms = 0
    try:
        # One slot for the few short calls: they are one piece of work.
        async with ctx.gate.slot(prefix=key_audit.PREFIX) as slot:
            held_back = await hold_back(ctx, job)  # stopping, paused, the server failed
            if held_back is not None:
                return held_back
            for _ in range(conf.KEY_AUDIT_SAMPLES):
                try:
                    reply = await ctx.client.chat(
                        messages,
                        max_tokens=key_audit.MAX_TOKENS,
                        temperature=conf.KEY_AUDIT_TEMPERATURE,
                        on_sent=lambda: ctx.gate.sent(slot),
                        on_first_token=lambda: ctx.gate.warmed(key_audit.PREFIX),
                    )
                except LLMError as error:
                    return llm_failed(ctx, job, error)
                ctx.gate.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)
                elapsed_ms += reply.elapsed_ms
                replies.append(reply)
                answer = answers.choice_named(reply.content, question.choices)
                samples.append(key_audit.Sample(reply.content, answer))
                said = [sample.answer for sample in samples]
                if key_audit.settled(said, key, conf.KEY_AUDIT_SAMPLES):
                    break  # the rest could not change the verdict
    except GateTimeout as exc:
        return gate_timed_out(job, exc)
    ctx.breaker.success()
    usage = Usage.of(replies)
    return key_audit.Audited(question, samples, llm_ms=elapsed_ms, usage=usage)
