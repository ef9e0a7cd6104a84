"""The explanation worker (``workers/explanation.py``): what it stores from a reply (the
revision with its flags and stated answer, made current, the job pointing at it), what it
refuses to store (a reply for a question changed or deleted meanwhile, a lost claim), its one
quality retry, and how a failed call or an open breaker hands the job back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from django.db import connections
from django.utils import timezone

from studyqueue.consumer.consumer import Consumer
from studyqueue.explanations.prompts import current_version
from studyqueue.explanations.revisions import Written
from studyqueue.models import ErrorCode, ExplanationRevision, StudyQuestion, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue as enqueue_job
from studyqueue.queue.retry import MAX_FREE_RELEASES
from studyqueue.queue.transitions import Outcome
from studyqueue.services.llm import LLMError, LLMReply
from studyqueue.workers import explanation
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ENGLISH = "Seoul has been the capital of South Korea since the country was founded."
FIRST = "Because two and two make four, as counting on your fingers shows."


@pytest.fixture
def consumer(llm_server: LLMServer, make_consumer: Callable[..., Consumer]) -> Consumer:
    """A consumer of the test LLM server, with the settings in force when it is made."""
    return make_consumer()


@pytest.fixture
def long_breaker_pause(llm_server: LLMServer, settings) -> None:  # type: ignore[no-untyped-def]
    """The breaker stays open for a minute, not the fixture's 0.2 s: a loaded machine can
    take longer than that between the trip and the test's look at it."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 60}


def enqueue(n: int = 1, **question_fields) -> list[StudyQuestionJob]:  # type: ignore[no-untyped-def]
    return [enqueue_job(StudyQuestionFactory(**question_fields)).job for _ in range(n)]


def job_state(job: StudyQuestionJob) -> tuple:
    job.refresh_from_db()
    return job.status, job.error_code, job.attempts


def run(consumer: Consumer, job: StudyQuestionJob) -> Outcome:
    """Run the handler on a claimed job and write what it returns, as a cycle does."""

    async def go() -> Outcome:
        return await consumer.store.finish(job, await explanation.run(job, consumer.ctx))

    return asyncio.run(go())


def claimed_one() -> StudyQuestionJob:
    (job,) = transitions.claim(worker_id="test", limit=1)
    return job


def reply(content: str = FIRST) -> LLMReply:
    return LLMReply(
        content=content, model="m", finish_reason="stop", prompt_tokens=1, completion_tokens=2,
        elapsed_ms=30,
    )  # fmt: skip


def test_a_completed_job_stores_its_revision_with_flags_and_stated_answer(
    consumer: Consumer, llm_server: LLMServer
) -> None:
    llm_server.configure(answer="Three, because two and two make three.\nAnswer: 3")
    (job,) = enqueue(text="What is 2 + 2?", choices=["3", "4"], answer="4")
    # The explanation, then its blind check (the verifier names choice 1 too) and its step check.
    assert consumer.run_cycle().outcomes == {"completed": 3}
    assert job_state(job) == ("completed", "", 1)
    revision = ExplanationRevision.objects.get()
    assert (revision.stated_answer, revision.flags) == (
        "3",
        ["answer_mismatch", "verifier_disagrees"],
    )
    assert revision.job_id == job.pk and job.revision == revision
    assert revision.prompt_version == current_version().hash
    question = StudyQuestion.objects.get()
    assert question.current_revision == revision
    assert question.explanation == revision.text
    assert question.explanation_flags == ["answer_mismatch", "verifier_disagrees"]


def test_a_reply_for_a_question_changed_during_the_call_is_not_stored() -> None:
    """Released, free of an attempt, while the policy allows; then a counted failure."""
    question = StudyQuestionFactory(text="What is 2 + 2?")
    enqueue_job(question)
    job = claimed_one()
    StudyQuestion.objects.filter(pk=question.pk).update(text="What is 3 + 3?")
    outcome = Written(question, reply(), current_version(), []).write(job)
    assert outcome is Outcome.RELEASED
    assert job_state(job) == ("pending", ErrorCode.QUESTION_CHANGED, 0)
    assert not ExplanationRevision.objects.exists()
    assert StudyQuestion.objects.get().current_revision is None

    StudyQuestionJob.objects.filter(pk=job.pk).update(
        free_releases=MAX_FREE_RELEASES, run_after=timezone.now()
    )
    job = claimed_one()
    outcome = Written(question, reply(), current_version(), []).write(job)
    assert outcome is Outcome.RETRYING
    assert job_state(job) == ("pending", ErrorCode.QUESTION_CHANGED, 1)
    assert not ExplanationRevision.objects.exists()


@pytest.mark.parametrize(
    "fault,outcome,attempts,breaker_open",
    [
        ("500", Outcome.RETRYING, 1, False),  # one job's failure: counted
        ("503", Outcome.RELEASED, 0, True),  # the server's: handed back, the breaker opens
    ],
)
@pytest.mark.usefixtures("long_breaker_pause")
def test_a_failed_call_retries_or_releases_per_the_policy(
    consumer: Consumer,
    llm_server: LLMServer,
    fault: str,
    outcome: Outcome,
    attempts: int,
    breaker_open: bool,
) -> None:
    llm_server.configure(fault=fault)
    enqueue()
    job = claimed_one()
    assert run(consumer, job) is outcome
    assert job_state(job)[0::2] == ("pending", attempts)
    assert consumer.pool.members[0].breaker.allows() is not breaker_open
    assert not ExplanationRevision.objects.exists()


@pytest.mark.usefixtures("long_breaker_pause")
def test_an_open_breaker_releases_a_job_at_the_gate_without_a_call(
    consumer: Consumer, llm_server: LLMServer
) -> None:
    """The server failed while the job waited for its slot: it is not asked again."""
    enqueue()
    job = claimed_one()
    consumer.pool.members[0].breaker.trip(
        LLMError(ErrorCode.LLM_OVERLOADED, "busy", affects_all=True)
    )
    assert run(consumer, job) is Outcome.RELEASED
    assert job_state(job) == ("pending", ErrorCode.LLM_OVERLOADED, 0)
    job.refresh_from_db()
    assert job.run_after > timezone.now(), "due again when the breaker closes"
    assert llm_server.stats()["requests"] == 0
    assert consumer.pool.members[0].gate.free_slots == consumer.pool.members[0].gate.permits, (
        "the slot was given back"
    )


def test_truncated_reply_is_stored_but_flagged(consumer, llm_server):
    llm_server.configure(fault="length")
    (job,) = enqueue()
    consumer.run_cycle()
    assert job_state(job)[0] == "completed"
    question = StudyQuestion.objects.get()
    assert question.explanation and question.current_revision.truncated


def test_missing_and_empty_questions_fail_permanently(llm_server, make_consumer):
    (missing,) = enqueue()
    (empty,) = enqueue(text="   ")
    StudyQuestion.objects.filter(pk=missing.study_question_id).delete()
    make_consumer(batch_size=2).run_cycle()
    assert job_state(missing) == ("failed", "question_missing", 1)
    assert job_state(empty) == ("failed", "question_empty", 1)
    assert llm_server.stats()["requests"] == 0


def test_a_question_deleted_during_its_call_ends_failed(consumer, llm_server):
    llm_server.configure(delay=0.5)
    (job,) = enqueue()

    def delete_when_running() -> None:
        try:
            wait_for(lambda: llm_server.stats()["active"] == 1, what="the LLM call")
            StudyQuestion.objects.all().delete()
        finally:
            connections.close_all()  # this thread's own DB connection

    thread = threading.Thread(target=delete_when_running)
    thread.start()
    result = consumer.run_cycle()
    thread.join()
    assert result.outcomes == {"failed": 1}
    assert job_state(job) == ("failed", "question_missing", 1)


@pytest.mark.django_db(transaction=True)
def test_a_flag_set_to_retry_retries_once_with_doubled_max_tokens(
    llm_server, settings, make_consumer
):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "QUALITY_RETRY": "truncated"}
    llm_server.configure(answer=LONG_ENGLISH, fault="length")  # always cut
    job = enqueue_job(StudyQuestionFactory(text="Why is Seoul the capital?")).job
    consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"retrying": 1, "completed": 1}
    job.refresh_from_db()
    assert (job.status, job.attempts, job.quality_retried, job.max_tokens) == (
        "completed",
        2,
        True,
        2048,
    )
    assert [body["max_tokens"] for body in llm_server.bodies] == [1024, 2048]
    first, second = ExplanationRevision.objects.order_by("pk")
    question = StudyQuestion.objects.get()
    assert question.current_revision == second, "the retry's reply is current"
    assert job.revision == second, "the job points at the reply that completed it"
    assert first.flags == second.flags == ["truncated"], "still cut: flagged, not retried again"


def test_a_reply_whose_claim_was_lost_leaves_no_revision_and_no_pointer():
    """The revision is written before the fenced completion: a lost claim rolls both back."""
    question = StudyQuestionFactory(text="What is 2 + 2?")
    enqueue_job(question)
    (old,) = transitions.claim(worker_id="old")
    StudyQuestionJob.objects.filter(pk=old.pk).update(
        heartbeat_at=timezone.now() - timezone.timedelta(hours=1)
    )
    assert transitions.reset_stale().reset == 1
    (new,) = transitions.claim(worker_id="new")
    reply = LLMReply(
        content=FIRST, model="m", finish_reason="stop", prompt_tokens=1, completion_tokens=2,
        elapsed_ms=30,
    )  # fmt: skip
    written = Written(question, reply, current_version(), [])
    assert written.write(old) == Outcome.LOST
    assert not ExplanationRevision.objects.exists()
    assert written.write(new) == Outcome.COMPLETED
    job = StudyQuestionJob.objects.get()
    assert job.revision == ExplanationRevision.objects.get() and job.llm_ms == 30
