"""The key audit handler: ask the model for the answer alone (never shown the key) up to
``KEY_AUDIT_SAMPLES`` times, and return the samples (``key_audit.Audited``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from studyqueue.conf import conf
from studyqueue.explanations import answers, key_audit
from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob
from studyqueue.queue.store import JobResult
from studyqueue.queue.transitions import Usage
from studyqueue.services.llm import LLMReply
from studyqueue.services.pool import Held
from studyqueue.workers.registry import (
    WorkContext,
    handler,
    invalid_choices,
    on_endpoint,
    question_to_check,
)


@handler(JobKind.KEY_AUDIT)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed key audit job; what happened, for the consumer to write."""
    question = await question_to_check(job, ctx)
    if not isinstance(question, StudyQuestion):
        return question
    try:
        messages = key_audit.build_messages(question)
    except ValidationError as exc:
        return invalid_choices(job, exc)
    key = answers.key_choice(question.answer, question.choices)
    samples: list[key_audit.Sample] = []
    replies: list[LLMReply] = []

    async def sample(held: Held) -> None:
        # One slot for the few short calls; after a server fails, another takes the rest.
        planned = conf.KEY_AUDIT_SAMPLES
        while len(samples) < planned:
            if key_audit.settled([s.answer for s in samples], key, planned):
                return  # the rest could not change the verdict
            reply = await held.chat(
                messages, max_tokens=key_audit.MAX_TOKENS, temperature=conf.KEY_AUDIT_TEMPERATURE
            )
            replies.append(reply)
            answer = answers.choice_named(reply.content, question.choices)
            samples.append(key_audit.Sample(reply.content, answer))

    outcome = await on_endpoint(ctx, job, sample, prefix=key_audit.PREFIX)
    if outcome is not None:
        return outcome
    llm_ms = sum(reply.elapsed_ms for reply in replies)
    return key_audit.Audited(question, samples, llm_ms=llm_ms, usage=Usage.of(replies))
