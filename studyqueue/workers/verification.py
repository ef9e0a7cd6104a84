"""The verification handler: show the model a new explanation's reasoning, its statements of
the answer hidden, and return the choice it names (``verifier.Verified``)."""

from __future__ import annotations

import asyncio

from django.core.exceptions import ValidationError

from studyqueue.explanations import answers, verifier
from studyqueue.models import JobKind, StudyQuestionJob
from studyqueue.queue.attempts import Usage
from studyqueue.queue.store import JobResult
from studyqueue.services.llm import LLMReply
from studyqueue.workers.registry import (
    WorkContext,
    ask,
    handler,
    invalid_choices,
    revision_to_check,
)


@handler(JobKind.VERIFICATION, priority=1)  # never slows the next explanation
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed verification job; what happened, for the consumer to write."""
    found = await revision_to_check(job, ctx, "VERIFY")
    if not isinstance(found, tuple):
        return found
    question, revision = found
    try:
        # In a thread: a reply may be megabytes (LLM_MAX_REPLY_BYTES), and reading it all
        # must not hold up the other jobs of this event loop.
        blind = await asyncio.to_thread(verifier.blind, question, revision.text)
    except ValidationError as exc:
        return invalid_choices(job, exc)
    if blind.problem:
        return verifier.Verified.not_asked(question, revision, blind.problem)
    messages = verifier.build_messages(question, blind.text)
    reply = await ask(
        ctx, job, messages, prefix=verifier.PREFIX, max_tokens=verifier.MAX_TOKENS,
        temperature=0.0,
    )  # fmt: skip
    if not isinstance(reply, LLMReply):
        return reply  # handed back, or the call failed
    return verifier.Verified(
        question,
        revision,
        reply.content,
        answers.choice_named(reply.content, question.choices),
        usage=Usage.of([reply]),
        llm_ms=reply.elapsed_ms,
    )
