"""Concurrency proofs with real processes, threads and second connections."""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.utils import timezone

from studyqueue.models import JobStatus, StudyQuestion, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import EnqueueResult, enqueue, enqueue_many
from tests.factories import StudyQuestionFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _bulk_questions(n: int) -> list[int]:
    StudyQuestion.objects.bulk_create(StudyQuestion(text=f"q{i}") for i in range(n))
    return list(StudyQuestion.objects.values_list("pk", flat=True))


def _step_together(procs: list[subprocess.Popen], said: str) -> list[str]:
    """Wait until every process said ``said`` (a line's start), then let them all go on;
    what each said."""
    lines = []
    for proc in procs:
        line = proc.stdout.readline().strip()
        assert line.startswith(said), line
        lines.append(line)
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return lines


def test_four_processes_claim_every_job_exactly_once(child_env, python, vendor):
    n_jobs = 2000 if vendor == "postgresql" else 600
    assert enqueue_many(_bulk_questions(n_jobs)) == n_jobs
    procs = [
        subprocess.Popen(
            [python, "-m", "tests.helpers.claim_worker", f"p{i}", str(1 + i % 2)],
            env=child_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    _step_together(procs, "ready")
    # Each worker holds its first claim until all four hold one: they overlap by
    # construction (one of them may otherwise take every job, which is no fault of the
    # claim), and no claim may hand out a job another still holds.
    held = _step_together(procs, "holding")
    assert held == [f"holding {1 + i % 2}" for i in range(4)]
    per_worker = []
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0
        per_worker.append(json.loads(out.strip().splitlines()[-1]))
    counts = Counter(job_id for ids in per_worker for job_id in ids)
    duplicates = [job_id for job_id, n in counts.items() if n > 1]
    sizes = [len(ids) for ids in per_worker]
    print(f"jobs={n_jobs} per_worker={sizes} duplicates={len(duplicates)}")
    assert duplicates == []
    assert len(counts) == n_jobs
    assert StudyQuestionJob.objects.filter(status=JobStatus.COMPLETED).count() == n_jobs


def test_eight_threads_enqueueing_one_pair_make_one_active_job():
    question = StudyQuestionFactory()
    barrier = threading.Barrier(8)
    results: list[EnqueueResult] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait(timeout=30)
            results.append(enqueue(question.pk))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(results) == 8
    assert sum(r.created for r in results) == 1
    assert len({r.job.pk for r in results}) == 1
    assert StudyQuestionJob.objects.count() == 1


def test_old_worker_on_another_connection_is_fenced_out():
    """Worker A (own thread, own connection) loses its job to B while it is 'working'."""
    StudyQuestionFactory()
    enqueue(StudyQuestion.objects.get())
    claimed_by_a = threading.Event()
    b_has_it = threading.Event()
    outcome: dict[str, object] = {}

    def worker_a() -> None:
        try:
            (job,) = transitions.claim(worker_id="A", limit=1)
            outcome["a_job"] = job
            claimed_by_a.set()
            assert b_has_it.wait(timeout=30)
            outcome["a_heartbeat"] = transitions.heartbeat(job)
            outcome["a_complete"] = transitions.complete(job, llm_ms=1)
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker_a)
    thread.start()
    assert claimed_by_a.wait(timeout=30)
    job_a = outcome["a_job"]
    StudyQuestionJob.objects.filter(pk=job_a.pk).update(
        heartbeat_at=timezone.now() - timezone.timedelta(hours=1)
    )
    assert transitions.reset_stale().reset == 1
    (job_b,) = transitions.claim(worker_id="B", limit=1)
    b_has_it.set()
    thread.join(timeout=30)
    assert outcome["a_heartbeat"] is False and outcome["a_complete"] == transitions.Outcome.LOST
    row = StudyQuestionJob.objects.get()
    assert (row.status, row.worker_id) == ("processing", "B")
    assert transitions.complete(job_b, llm_ms=2) == transitions.Outcome.COMPLETED
    row.refresh_from_db()
    assert (row.status, row.llm_ms, row.attempts) == ("completed", 2, 2)
    assert connection.vendor in {"postgresql", "sqlite"}
