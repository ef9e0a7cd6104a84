"""runconsumer as real processes: SIGKILL recovery, SIGTERM, several consumers, wake-up."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from django_apscheduler.models import DjangoJob, DjangoJobExecution

from studyqueue import queue
from studyqueue.models import StudyQuestion, StudyQuestionJob
from tests.conftest import wait_for
from tests.helpers.processes import bulk_jobs, log_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_sigkill_mid_call_is_recovered_and_written_once(consumers, llm_server):
    llm_server.configure(delay=2.0)
    (question_id,) = bulk_jobs(1)
    fast = {"HEARTBEAT_SECONDS": 0.2, "STALE_MINUTES": 0.03, "LLM_TIMEOUT_SECONDS": 1.5}
    victim = consumers("--once", "--worker-id", "victim", **fast)
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the victim's LLM call")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.worker_id, job.attempts) == ("processing", "victim", 1)

    llm_server.configure(delay=0.0)
    rescuer = consumers("--interval", "0.3", "--worker-id", "rescuer", **fast)
    started = time.monotonic()
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="completed").exists(),
        timeout=60,
        what="the rescuer to finish the job",
    )
    recovery = time.monotonic() - started
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(timeout=30) == 0
    job.refresh_from_db()
    assert (job.status, job.worker_id, job.attempts) == ("completed", "rescuer", 2)
    assert StudyQuestionJob.objects.count() == 1
    assert StudyQuestion.objects.get(pk=question_id).explanation
    assert log_text(rescuer).count(f"study_job_completed id={job.pk} ") == 1
    assert f"study_job_stale_reset id={job.pk} " in log_text(rescuer)
    print(f"recovery_s={recovery:.2f} llm_requests={llm_server.stats()['requests']}")


def test_sigterm_lets_the_running_job_finish_and_consumers_keep_their_own_rows(
    consumers, llm_server
):
    llm_server.configure(delay=0.02)
    bulk_jobs(20)
    first = consumers("--interval", "0.5", "--worker-id", "c1")
    second = consumers("--interval", "0.5", "--worker-id", "c2")
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="completed").count() == 20,
        timeout=60,
        what="20 jobs completed",
    )
    llm_server.configure(delay=1.5)
    StudyQuestion.objects.create(text="the slow one")
    queue.enqueue(StudyQuestion.objects.get(text="the slow one"))
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the slow call")
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    assert second.wait(timeout=30) == 0
    assert StudyQuestionJob.objects.filter(status="completed").count() == 21
    assert not StudyQuestionJob.objects.filter(status="processing").exists()

    ids = set(DjangoJob.objects.values_list("id", flat=True))
    assert ids == {
        "studyqueue@c1/consume",
        "studyqueue@c1/prune",
        "studyqueue@c2/consume",
        "studyqueue@c2/prune",
    }
    per_job = Counter(DjangoJobExecution.objects.values_list("job_id", flat=True))
    assert per_job["studyqueue@c1/consume"] >= 1 and per_job["studyqueue@c2/consume"] >= 1
    statuses = set(DjangoJobExecution.objects.values_list("status", flat=True))
    assert DjangoJobExecution.MAX_INSTANCES not in statuses
    assert DjangoJobExecution.ERROR not in statuses


@pytest.mark.postgres
def test_two_draining_consumers_share_one_gate(consumers, llm_server):
    llm_server.configure(delay=0.005)
    bulk_jobs(200)
    procs = [consumers("--drain", "--worker-id", f"d{i}", GATE_PERMITS=1) for i in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="completed").count() == 200,
        timeout=30,
        what="200 completed",
    )
    stats = llm_server.stats()
    per_question = Counter(stats["per_question"])
    print(f"jobs=200 requests={stats['requests']} max_active={stats['max_active']}")
    assert stats["max_active"] == 1, "the gate let two calls through at once"
    assert len(per_question) == 200 and set(per_question.values()) == {1}
    workers = Counter(StudyQuestionJob.objects.values_list("worker_id", flat=True))
    print(f"per_worker={dict(workers)}")
    assert set(workers) == {"d0", "d1"}, "both consumers should have taken jobs"


@pytest.mark.postgres
def test_an_idle_consumer_wakes_on_enqueue(consumers, llm_server):
    proc = consumers("--worker-id", "idle", INTERVAL_SECONDS=120)
    wait_for(lambda: "study_consumer_cycle worker=idle" in log_text(proc), what="first cycle")
    wait_for(lambda: "study_listen_ready" in log_text(proc), what="LISTEN to be set up")
    question = StudyQuestion.objects.create(text="wake up")
    enqueued = time.monotonic()
    job = queue.enqueue(question).job
    wait_for(
        lambda: StudyQuestionJob.objects.get(pk=job.pk).status == "completed",
        timeout=10,
        what="the job to complete without waiting for the 120 s poll",
    )
    print(f"wake_to_completed_s={time.monotonic() - enqueued:.3f}")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
