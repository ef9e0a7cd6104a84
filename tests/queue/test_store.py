"""The job store (``studyqueue/queue/store.py``): connections of its own, and the
results a handler returns written as the transitions they name, fenced by the claim."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from studyqueue.models import ErrorCode, StudyQuestionJob, database
from studyqueue.queue import retry, transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.operations import skip
from studyqueue.queue.store import Failed, JobStore, Released, Skipped
from studyqueue.queue.transitions import Outcome
from tests.factories import StudyQuestionFactory
from tests.helpers.queries import QueryLog

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store() -> Iterator[JobStore]:
    store = JobStore()
    yield store
    store.close()


def _session() -> tuple[int, int]:
    """This thread and the database session its connection holds."""
    connection = connections[database()]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
            return threading.get_ident(), cursor.fetchone()[0]
    return threading.get_ident(), id(connection.connection)


def test_the_jobs_the_claims_and_the_gate_keep_connections_of_their_own(store):
    """The jobs' writes reach their own sessions, the claims another, the gate's locks a
    third, and the async ORM none of them. Writes one at a time take one jobs' session."""
    job = StudyQuestionJob(pk=1)

    async def sessions() -> list[set]:
        runs = (lambda fn: store.on_jobs(lambda _: fn(), job), store.on_claims, store.on_gate)
        found = [{await run(_session) for _ in range(5)} for run in runs]
        return [*found, {await sync_to_async(_session)() for _ in range(5)}]

    found = asyncio.run(sessions())
    assert [len(one) for one in found] == [1, 1, 1, 1]
    assert len(set().union(*found)) == 4, "four threads, four sessions"
    assert _session() not in set().union(*found)
    asyncio.run(sync_to_async(connections.close_all)())


def test_two_jobs_write_at_once_on_postgresql_and_a_jobs_writes_stay_in_order(store):
    """While job 1's write holds its connection, job 2's goes to the other (PostgreSQL; on
    SQLite, the one writer, after it) and job 1's next write queues behind its first."""
    release = threading.Event()
    order: list[str] = []

    def hold(job: StudyQuestionJob) -> tuple:
        release.wait(10)
        order.append("1a")
        return _session()

    def note(name: str) -> Callable[[StudyQuestionJob], tuple]:
        def write(job: StudyQuestionJob) -> tuple:
            order.append(name)
            return _session()

        return write

    async def writes() -> list[tuple]:
        one, two = StudyQuestionJob(pk=1), StudyQuestionJob(pk=2)
        first = asyncio.ensure_future(store.on_jobs(hold, one))
        await asyncio.sleep(0)  # job 1's write is on its way
        then = asyncio.ensure_future(store.on_jobs(note("1b"), one))
        other = asyncio.ensure_future(store.on_jobs(note("2"), two))
        postgres = connections[database()].vendor == "postgresql"
        if postgres:
            await asyncio.wait_for(asyncio.shield(other), 10)  # not behind job 1's
        release.set()
        return list(await asyncio.gather(first, then, other))

    first, then, other = asyncio.run(writes())
    assert first == then and order.index("1a") < order.index("1b")
    postgres = connections[database()].vendor == "postgresql"
    assert (other != first) is postgres
    if postgres:
        assert order[0] == "2"
    asyncio.run(sync_to_async(connections.close_all)())


def claimed(**fields) -> StudyQuestionJob:  # type: ignore[no-untyped-def]
    enqueue(StudyQuestionFactory())
    StudyQuestionJob.objects.update(**fields)
    (job,) = transitions.claim(worker_id="test", limit=1)
    return job


def state(job: StudyQuestionJob) -> tuple:
    job.refresh_from_db()
    return job.status, job.error_code, job.attempts


RESULTS = [
    (Released("consumer stopping"), Outcome.RELEASED, ("pending", "", 0)),
    (
        Released("busy", delay=30, code=ErrorCode.LLM_OVERLOADED),
        Outcome.RELEASED,
        ("pending", "llm_overloaded", 0),
    ),
    (Skipped(ErrorCode.UNKNOWN_KIND, "no"), Outcome.SKIPPED, ("skipped", "unknown_kind", 1)),
]


@pytest.mark.parametrize("result,outcome,after", RESULTS)
def test_finish_writes_a_result_as_its_transition(store, result, outcome, after):
    job = claimed()
    assert asyncio.run(store.finish(job, result)) is outcome
    assert state(job) == after


@pytest.mark.parametrize(
    "failure,max_attempts,outcome,after",
    [
        (retry.Failure(ErrorCode.LLM_TIMEOUT), 3, Outcome.RETRYING, ("pending", "llm_timeout", 1)),
        (retry.Failure(ErrorCode.LLM_TIMEOUT), 1, Outcome.FAILED, ("failed", "llm_timeout", 1)),
        (
            retry.Failure(ErrorCode.QUESTION_CHANGED, job_at_fault=False),
            3,
            Outcome.RELEASED,
            ("pending", "question_changed", 0),
        ),
        (retry.Failure(ErrorCode.LLM_REJECTED), 3, Outcome.FAILED, ("failed", "llm_rejected", 1)),
    ],
)
def test_finish_applies_the_policys_decision(store, failure, max_attempts, outcome, after):
    job = claimed(max_attempts=max_attempts)
    assert asyncio.run(store.finish(job, Failed.decided(job, failure))) is outcome
    assert state(job) == after


def test_a_result_for_a_claim_no_longer_ours_writes_nothing(store):
    job = claimed()
    skip([job.pk])  # an operator takes it
    failed = Failed.decided(job, retry.Failure(ErrorCode.LLM_TIMEOUT))
    assert asyncio.run(store.finish(job, failed)) is Outcome.LOST
    assert state(job) == ("skipped", "operator_skipped", 1)


def test_claim_reset_stale_and_question_run_on_the_claims_connection(store):
    question = StudyQuestionFactory(text="What is 2 + 2?")
    enqueue(question)

    async def cycle() -> tuple:
        jobs = await store.claim("test", 5)
        return jobs, await store.question(jobs[0]), await store.reset_stale()

    jobs, read, stale = asyncio.run(cycle())
    assert [job.study_question_id for job in jobs] == [question.pk]
    assert read == question and read.text == "What is 2 + 2?"
    assert (stale.reset, stale.failed) == (0, 0)
    assert asyncio.run(store.heartbeat(jobs[0])) is True


def test_a_claim_reads_no_question_and_a_handler_reads_its_own(store):
    """The claim costs its own statements only (a notice or a no-op job needs no question); a
    handler that needs its question reads it with one statement."""
    questions = [StudyQuestionFactory(text=f"What is {n} + {n}?") for n in range(2)]
    for question in questions:
        enqueue(question)
    with QueryLog() as log:
        jobs = asyncio.run(store.claim("test", 5))
        assert not [q for q in log.queries if 'FROM "studyqueue_studyquestion"' in q.sql]
        read = [asyncio.run(store.question(job)) for job in jobs]
    assert read == questions
    assert len([q for q in log.queries if 'FROM "studyqueue_studyquestion"' in q.sql]) == 2


def test_on_sqlite_the_three_connections_take_turns(store):
    """SQLite has one writer at a time: the store's threads wait for each other's turn rather
    than poll the locked file (sleeping 1, 2, 5 ms...); on PostgreSQL they run at once."""
    inside: list[str] = []
    most = 0
    lock = threading.Lock()

    def hold(name: str) -> None:
        nonlocal most
        with lock:
            inside.append(name)
            most = max(most, len(inside))
        deadline = time.monotonic() + 0.2
        while len(inside) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)  # long enough for the others to come in, if they may
        with lock:
            inside.remove(name)

    async def all_three() -> None:
        job = StudyQuestionJob(pk=1)
        await asyncio.gather(
            store.on_jobs(lambda _: hold("j"), job),
            store.on_claims(hold, "c"),
            store.on_gate(hold, "g"),
        )

    asyncio.run(all_three())
    assert most == (1 if connections[database()].vendor == "sqlite" else 3)
