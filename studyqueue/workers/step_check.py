"""The step check's handler: show the model the key and a new explanation, one numbered
sentence a line, and return the first wrong sentence it names (``step_check.StepChecked``)."""

from __future__ import annotations

import asyncio

from django.core.exceptions import ValidationError

from studyqueue.explanations import step_check
from studyqueue.models import JobKind, StudyQuestionJob
from studyqueue.queue.store import JobResult
from studyqueue.services.llm import LLMReply
from studyqueue.workers.registry import (
    WorkContext,
    ask,
    handler,
    invalid_choices,
    revision_to_check,
)


@handler(JobKind.STEP_CHECK, priority=1)  # never slows the next explanation
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed step check job; what happened, for the consumer to write."""
    found = await revision_to_check(job, ctx, "STEP_CHECK", step_check=True)
    if not isinstance(found, tuple):
        return found
    question, revision = found
    try:
        # In a thread: a reply may be megabytes (LLM_MAX_REPLY_BYTES).
        messages = await asyncio.to_thread(step_check.build_messages, question, revision.text)
    except ValidationError as exc:
        return invalid_choices(job, exc)
    reply = await ask(
        ctx, job, messages, prefix=step_check.PREFIX, max_tokens=step_check.MAX_TOKENS,
        temperature=0.0,
    )  # fmt: skip
    if not isinstance(reply, LLMReply):
        return reply  # handed back, or the call failed
    return step_check.checked(question, revision, reply)
