"""The step check's handler: show the model the key and a new explanation, one numbered
sentence a line, and return the first wrong sentence it names (``step_check.StepChecked``)."""

from __future__ import annotations

from studyqueue.explanations import step_check
from studyqueue.models import JobKind, StudyQuestionJob
from studyqueue.queue.store import JobResult
from studyqueue.workers.registry import WorkContext, ask_check, handler


# Priority 1: never slows the next explanation.
@handler(JobKind.STEP_CHECK, priority=1, after_explanation="STEP_CHECK")
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed step check job; what happened, for the consumer to write."""
    asked = await ask_check(
        job,
        ctx,
        lambda question, revision: step_check.build_messages(question, revision.text),
        prefix=step_check.PREFIX,
        max_tokens=step_check.MAX_TOKENS,
        step_check=True,
    )
    return step_check.checked(*asked) if isinstance(asked, tuple) else asked
