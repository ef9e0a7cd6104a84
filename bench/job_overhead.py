"""Per-job overhead on the real path, with a breakdown of where it goes.

    python -m bench.job_overhead [--db sqlite|postgres] [--jobs 300] [--runs 5]

The real path: ``runconsumer --drain`` (gate 1, BATCH_SIZE 1) against the test LLM
server in its own process answering at once (delay 0), so every millisecond per job is
the consumer's: claim -> load the question -> gate -> HTTP call -> store -> complete.
The breakdown times each step alone, in the same run, on the same database:

- claim + complete: ``queue.claim`` then ``queue.complete``, one job at a time;
- load + prompt: the question read and the prompt templates rendered;
- gate: acquire and release one slot (its lease taken and given back: two updates);
- HTTP call: ``LLMClient.chat`` to the instant server (httpx, streaming);
- store: the explanation written and the job completed in one transaction;
- store, a regeneration: the same for questions that already have an explanation.

The parts overlap in the consumer (the next job is claimed and loaded while a call
runs), so their sum is more than the path's own time per job.

The questions ask what 2 + 2 is and their key is "4", which the test server's reply
states, as most real replies state their key: a flagged reply would log a warning for
every job (until 1 December 2026 every job here was flagged ``no_answer_stated``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench.common import fill_queue, median_of, setup_django

# A reply that states its question's key (as ``_fill``'s questions have it), so not flagged.
REPLY = "An explanation of the answer, long enough.\nAnswer: 4"


def _fill(jobs: int) -> None:
    from studyqueue.models import StudyQuestion

    # Questions the test server's reply answers as their key does ("Answer: 4"), as most
    # real replies do: a job flagged for a missing answer would log a warning each.
    fill_queue(
        StudyQuestion(text=f"What is 2 + 2? ({i})", choices=["3", "4"], answer="4")
        for i in range(jobs)
    )


def _per_job_ms(jobs: int, step: Callable[[], None]) -> float:
    started = time.perf_counter()
    for _ in range(jobs):
        step()
    return (time.perf_counter() - started) * 1000 / jobs


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    setup_django(args.db)
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from studyqueue.explanations import revisions
    from studyqueue.explanations.prompts import build_messages, current_version
    from studyqueue.explanations.revisions import Written
    from studyqueue.models import StudyQuestion, StudyQuestionJob, database
    from studyqueue.queue import transitions
    from studyqueue.queue.enqueue import enqueue_many
    from studyqueue.services.gate import LLMGate
    from studyqueue.services.llm import LLMClient, LLMReply
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess(delay=0.0)
    # One explanation job's path: its blind check would be a second job (bench.checking_cost).
    settings.STUDYQUEUE = {
        "LLM_URL": server.url,
        "GATE_PERMITS": 1,
        "BATCH_SIZE": 1,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    db = database()
    n = args.jobs

    def store_reply(job, question, reply, version, db):  # type: ignore[no-untyped-def]
        """What the explanation handler does with a reply: check it, then write it."""
        checked = revisions.check(question, reply.content, reply.finish_reason)
        return Written(question, reply, version, list(checked.flags), checked.stated).write(job)

    def path() -> float:
        _fill(n)
        started = time.perf_counter()
        call_command("runconsumer", "--drain", verbosity=0)
        elapsed = time.perf_counter() - started
        assert StudyQuestionJob.objects.filter(status="completed").count() == n
        return elapsed * 1000 / n

    def claim_complete() -> float:
        _fill(n)
        return _per_job_ms(
            n, lambda: transitions.complete(transitions.claim(worker_id="b", limit=1)[0])
        )

    def load_prompt() -> float:
        ids = list(StudyQuestion.objects.values_list("pk", flat=True)[:n])
        it = iter(ids)
        return _per_job_ms(
            n, lambda: build_messages(StudyQuestion.objects.using(db).get(pk=next(it)))
        )

    def gate() -> float:
        thread = ThreadPoolExecutor(max_workers=1)  # the consumer's database thread

        async def run_db(fn, *args):  # type: ignore[no-untyped-def]
            return await asyncio.get_running_loop().run_in_executor(thread, fn, *args)

        async def go() -> float:
            shared = LLMGate(server.url, run_db=run_db, permits=1, timeout=5, db=db)
            started = time.perf_counter()
            for _ in range(n):
                async with shared.slot():
                    pass
            return (time.perf_counter() - started) * 1000 / n

        try:
            return asyncio.run(go())
        finally:
            thread.submit(connections.close_all).result()
            thread.shutdown()

    def http_call() -> float:
        messages = [{"role": "user", "content": "Question:\nq\n"}]

        async def go() -> float:
            async with LLMClient(base_url=server.url) as client:
                await client.chat(messages)  # connect once, as a running consumer has
                started = time.perf_counter()
                for _ in range(n):
                    await client.chat(messages)
                return (time.perf_counter() - started) * 1000 / n

        return asyncio.run(go())

    def store() -> float:
        _fill(n)
        jobs = [transitions.claim(worker_id="b", limit=1)[0] for _ in range(n)]
        reply = LLMReply(REPLY, "m", "stop", 42, 7, 5)
        version = current_version()
        it = iter(jobs)

        def one() -> None:
            job = next(it)
            question = StudyQuestion.objects.get(pk=job.study_question_id)
            store_reply(job, question, reply, version, db)

        return _per_job_ms(n, one)

    def store_again() -> float:
        # A regeneration: each question already has a current explanation (whose review the
        # store reads with the question).
        _fill(n)
        reply = LLMReply(REPLY, "m", "stop", 42, 7, 5)
        version = current_version()
        for _ in range(n):
            job = transitions.claim(worker_id="b", limit=1)[0]
            question = StudyQuestion.objects.get(pk=job.study_question_id)
            store_reply(job, question, reply, version, db)
        enqueue_many(StudyQuestion.objects.values_list("pk", flat=True))
        jobs = [transitions.claim(worker_id="b", limit=1)[0] for _ in range(n)]
        questions = StudyQuestion.objects.in_bulk([job.study_question_id for job in jobs])
        it = iter(jobs)

        def one() -> None:
            job = next(it)
            store_reply(job, questions[job.study_question_id], reply, version, db)

        return _per_job_ms(n, one)

    steps = steps_of(path, claim_complete, load_prompt, gate, http_call, store, store_again)
    try:
        _report(args, n, steps)
    finally:
        server.stop()


def steps_of(*fns: Callable[[], float]) -> dict[str, Callable[[], float]]:
    names = [
        "real path (runconsumer --drain)",
        "claim + complete",
        "load + prompt",
        "gate acquire + release",
        "HTTP call (instant server)",
        "store (explanation + complete)",
        "store, a regeneration",
    ]
    return dict(zip(names, fns, strict=True))


def _report(args: argparse.Namespace, n: int, steps: dict[str, Callable[[], float]]) -> None:
    path = next(iter(steps.values()))
    path()  # warm-up: imports, first connections
    print(f"db={args.db} jobs={n} runs={args.runs} (ms per job, median of runs)")
    results = {}
    for name, fn in steps.items():
        median, values = median_of(args.runs, fn)
        results[name] = median
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:34} {median:6.2f} ms  (runs: {runs})")
    # The regeneration is another store, not one more part of a job.
    path_steps = ("real path", "store, a regeneration")
    parts = sum(v for k, v in results.items() if not k.startswith(path_steps))
    print(f"{'sum of the parts':34} {parts:6.2f} ms (they overlap in the consumer)")
    print(f"jobs_per_s on the real path: {1000 / results[next(iter(steps))]:.0f}")


if __name__ == "__main__":
    main()
