"""The job store: where a consumer's reads and writes run, as named async methods.

A consumer owns one ``JobStore`` for its life. The store keeps dedicated database
connections, each on a single-thread executor that ``sync_to_async`` runs on:

- the jobs' connections (two on PostgreSQL, one on SQLite): a job's writes (``heartbeat``,
  ``finish``), in order, on the least busy unless the job has writes in flight on one;
- the claims' connection: the cycle's claims, the stale scan, a job's reads before its LLM
  call (``question``) and the consumer's own bookkeeping (its record, the gate's limit), so
  that none of them queues behind a job's write;
- the gate's connection: the gate's leases (taken and given back between two LLM calls,
  where the server idles) and the last look at the pauses right before a call.

A handler never writes: it returns a ``JobResult`` (what happened), and ``finish`` writes
it, job, attempt and (for an explanation) revision and question in one transaction, through
``studyqueue.queue.transitions``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import ParamSpec, Protocol, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections, transaction

from studyqueue.models import (
    ExplanationRevision,
    StudyQuestion,
    StudyQuestionJob,
    database,
    revision_to_verify,
)
from studyqueue.queue import operations, pauses, pg, retry, sql, transitions
from studyqueue.queue.transitions import Outcome, StaleResult

P = ParamSpec("P")
T = TypeVar("T")


class JobResult(Protocol):
    """What a handler made of a claimed job; ``write`` records it (fenced by the claim) and
    returns what became of the job. Runs on the jobs' connection."""

    def write(self, job: StudyQuestionJob) -> Outcome: ...


@dataclass(frozen=True)
class Released:
    """Hand the job back, its attempt kept: the consumer is stopping, its kind was paused,
    or the server's breaker opened while it waited; it runs again after ``delay``."""

    message: str
    delay: float = 0.0
    code: str = ""
    level: int = logging.INFO  # DEBUG: the breaker's line says why (the server is down)

    def write(self, job: StudyQuestionJob) -> Outcome:
        return transitions.release(job, **asdict(self))  # its fields are release's arguments


@dataclass(frozen=True)
class Failed:
    """A failure and what ``retry.decide`` answered for it."""

    failure: retry.Failure
    decision: retry.Decision

    @classmethod
    def decided(cls, job: StudyQuestionJob, failure: retry.Failure) -> Failed:
        """``failure`` with the policy's decision for ``job``."""
        return cls(failure, retry.decide(failure, job))

    def write(self, job: StudyQuestionJob) -> Outcome:
        return transitions.apply(job, self.failure, self.decision)


@dataclass(frozen=True)
class Skipped:
    """Not run: a reserved or unknown kind, or nothing left to do."""

    code: str
    message: str

    def write(self, job: StudyQuestionJob) -> Outcome:
        return transitions.skip_claimed(job, self.code, self.message)


class Fenced:
    """A result with writes of its own beside the job's transition (a revision, a verdict, a
    summary, a set's record): ``writes`` makes both, in one transaction that keeps nothing
    when the claim was lost."""

    def writes(self, job: StudyQuestionJob) -> Outcome:
        """The result's writes and the job's transition (its outcome); the transaction is open."""
        raise NotImplementedError

    def write(self, job: StudyQuestionJob) -> Outcome:
        db = job._state.db
        with transaction.atomic(using=db):
            outcome = self.writes(job)
            if outcome is Outcome.LOST:
                transaction.set_rollback(True, using=db)  # another worker's now: keep nothing
        return outcome


class JobStore:
    """A consumer's connections and the named operations that run on them."""

    def __init__(self) -> None:
        self.alias = database()
        self._claims = ThreadPoolExecutor(max_workers=1, thread_name_prefix="studyqueue-claims")
        self._gate = ThreadPoolExecutor(max_workers=1, thread_name_prefix="studyqueue-gate")
        # SQLite has one writer at a time, and a writer that finds the file locked sleeps
        # 1, 2, 5 ms... before it looks again: one jobs' thread, and the threads take turns
        # here instead. PostgreSQL: two, so that one job's commit never waits for another's.
        sqlite = not sql.postgres(self.alias)
        self._jobs = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"studyqueue-db{n}")
            for n in range(1 if sqlite else 2)
        ]
        # Per job with writes queued or running: its connection, how many.
        self._writing: dict[int, tuple[int, int]] = {}
        self._turns = threading.Lock() if sqlite else contextlib.nullcontext()
        # The claims' connection is one session of its own: the claim is planned once on it.
        self._prepared = pg.mode(self.alias) is pg.Mode.SESSION
        # Jobs their caller created to run itself (``manage.py explain``): never handed to a
        # consumer, which may write with other settings (``_kept``).
        self.kept: set[int] = set()

    # The runners: each sync function runs on one connection. Handlers use the named
    # methods below; the consumer's bookkeeping and the gate use these.

    async def on_jobs(self, fn: Callable[[StudyQuestionJob], T], job: StudyQuestionJob) -> T:
        """Run ``fn(job)`` (ORM) on a jobs' connection: the one the job's writes in flight
        use, so that they stay in order, else the least busy (on the consumer's loop)."""
        load = [0] * len(self._jobs)
        for used, pending in self._writing.values():
            load[used] += pending
        n, pending = self._writing.get(job.pk, (load.index(min(load)), 0))
        self._writing[job.pk] = (n, pending + 1)
        try:
            return await self._on(self._jobs[n], functools.partial(fn, job))
        finally:
            left = self._writing.pop(job.pk)[1] - 1
            if left:
                self._writing[job.pk] = (n, left)

    async def on_claims(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a sync (ORM) function on the claims' connection."""
        return await self._on(self._claims, functools.partial(fn, *args, **kwargs))

    async def on_gate(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a sync function on the gate's connection (``LLMGate``'s ``run_db``)."""
        return await self._on(self._gate, functools.partial(fn, *args, **kwargs))

    async def _on(self, thread: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        def in_turn() -> T:
            with self._turns:
                return call()

        return await sync_to_async(in_turn, thread_sensitive=False, executor=thread)()

    # The cycle, on the claims' connection.

    async def claim(
        self, worker_id: str, limit: int, *, deliveries: bool = True, level: int = logging.INFO
    ) -> list[StudyQuestionJob]:
        """Claim up to ``limit`` ready jobs in id order (``transitions.claim``, logged at
        ``level``). A job's question is read by its handler (``question``), if it needs one."""
        return await self.on_claims(
            transitions.claim,
            worker_id=worker_id,
            limit=limit,
            deliveries=deliveries,
            level=level,
            prepared=self._prepared,
        )

    async def reset_stale(self) -> StaleResult:
        """Put jobs with no heartbeat for ``STALE_MINUTES`` back (``transitions.reset_stale``):
        how many (the cycle counts them; their ids are in the jobs' log lines)."""
        return await self.on_claims(transitions.reset_stale)

    async def question(self, job: StudyQuestionJob) -> StudyQuestion | None:
        """The job's question as its handler reads it before the call; None if deleted. On
        the claims' connection: on the jobs' it would wait behind the previous job's write."""
        return await self.on_claims(_question, job)

    async def revision_to_verify(
        self, question: StudyQuestion, *, step_check: bool = False
    ) -> ExplanationRevision | None:
        """The revision a verification (or step check) job of ``question`` checks, on the
        claims' connection (``models.revision_to_verify``)."""
        return await self.on_claims(revision_to_verify, question, step_check=step_check)

    # A job's writes, on the jobs' connection.

    async def heartbeat(self, job: StudyQuestionJob) -> bool:
        """Refresh the job's liveness; False when its claim is no longer ours."""
        return await self.on_jobs(transitions.heartbeat, job)

    async def finish(self, job: StudyQuestionJob, result: JobResult) -> Outcome:
        """Write what a handler made of ``job``, fenced by its claim."""
        write = functools.partial(_kept, result) if job.pk in self.kept else result.write
        return await self.on_jobs(write, job)

    async def release(self, job: StudyQuestionJob, message: str) -> Outcome:
        """Hand back a job this consumer will not run, its attempt kept."""
        return await self.finish(job, Released(message))

    # The last look before a call, on the gate's connection.

    async def paused_kinds(self) -> list[str]:
        """The kinds paused now (``""``: every kind)."""
        return await self.on_gate(pauses.paused_kinds)

    async def close_old_connections(self) -> None:
        """Drop connections that are too old or broken (a restarted database), on each of
        the store's threads and the async ORM's."""
        for thread in (*self._jobs, self._claims, self._gate):
            await self._on(thread, close_old_connections)
        await sync_to_async(close_old_connections)()

    def close(self) -> None:
        """Close the connections and their threads (blocking; once)."""
        for thread in (*self._jobs, self._claims, self._gate):
            thread.submit(connections.close_all).result()
            thread.shutdown()


def _kept(result: JobResult, job: StudyQuestionJob) -> Outcome:
    """Write ``result`` for a kept job; if that sent it back to pending, it ends skipped in
    the same transaction, with the reason it went back: no consumer ever sees it pending."""
    with transaction.atomic(using=job._state.db):
        outcome = result.write(job)
        if outcome in (Outcome.RELEASED, Outcome.RETRYING):
            operations.withdraw(job.pk)
    return outcome


def _question(job: StudyQuestionJob) -> StudyQuestion | None:
    if job.study_question_id is None:
        return None
    return StudyQuestion.objects.filter(pk=job.study_question_id).first()
