"""The verification handler: show the model a new explanation's reasoning, its statements of
the answer hidden, and return the choice it names (``verifier.Verified``)."""

from __future__ import annotations

from studyqueue.explanations import answers, verifier
from studyqueue.models import ExplanationRevision, JobKind, StudyQuestion, StudyQuestionJob
from studyqueue.queue.store import JobResult
from studyqueue.queue.transitions import Usage
from studyqueue.workers.registry import WorkContext, ask_check, handler


def _messages(
    question: StudyQuestion, revision: ExplanationRevision
) -> list[dict[str, str]] | JobResult:
    """The verifier's messages, or its verdict without a call when it must not be asked."""
    blind = verifier.blind(question, revision.text)
    if blind.problem:
        return verifier.Verified.not_asked(question, revision, blind.problem)
    return verifier.build_messages(question, blind.text)


# Priority 1: never slows the next explanation.
@handler(JobKind.VERIFICATION, priority=1, after_explanation="VERIFY")
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed verification job; what happened, for the consumer to write."""
    asked = await ask_check(
        job, ctx, _messages, prefix=verifier.PREFIX, max_tokens=verifier.MAX_TOKENS
    )
    if not isinstance(asked, tuple):
        return asked
    question, revision, reply = asked
    return verifier.Verified(
        question,
        revision,
        reply.content,
        answers.choice_named(reply.content, question.choices),
        usage=Usage.of([reply]),
        llm_ms=reply.elapsed_ms,
    )
