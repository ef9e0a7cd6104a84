"""runconsumer as real processes: SIGKILL recovery, SIGTERM, several consumers, wake-up."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from django.db.models import Max
from django.utils import timezone
from django_apscheduler.models import DjangoJob, DjangoJobExecution

from studyqueue.models import StudyQuestion, StudyQuestionJob
from studyqueue.queue import operations, pauses
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.pauses import resume
from tests.helpers import wait_for
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
    enqueue(StudyQuestion.objects.get(text="the slow one"))
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
        "studyqueue@c1/xapi",
        "studyqueue@c2/consume",
        "studyqueue@c2/prune",
        "studyqueue@c2/xapi",
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


def test_an_idle_consumer_wakes_on_enqueue(consumers, llm_server, vendor):
    """An enqueue from another process starts at once, long before the 120 s interval: on
    PostgreSQL through NOTIFY (and nothing polls), on SQLite through the check each second."""
    proc = consumers("--worker-id", "idle", INTERVAL_SECONDS=120)
    wait_for(lambda: "study_consumer_cycle worker=idle" in log_text(proc), what="first cycle")
    waker = "study_listen_ready" if vendor == "postgresql" else "study_poll_ready"
    wait_for(lambda: waker in log_text(proc), what=waker)
    question = StudyQuestion.objects.create(text="wake up")
    enqueued = time.monotonic()
    job = enqueue(question).job
    wait_for(
        lambda: StudyQuestionJob.objects.get(pk=job.pk).status == "completed",
        timeout=10,  # the 2 s target is bench/wakeup.py's; slack here for a loaded machine
        what="the job to complete without waiting for the 120 s poll",
    )
    print(f"wake_to_completed_s={time.monotonic() - enqueued:.3f} vendor={vendor}")
    job.refresh_from_db()
    assert job.started_at is not None
    print(f"enqueue_to_claim_s={(job.started_at - job.created_at).total_seconds():.3f}")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    log = log_text(proc)
    assert ("study_poll_ready" in log) == (vendor != "postgresql")
    assert ("study_listen_ready" in log) == (vendor == "postgresql")


def _closed_after_skip(llm_server, job: StudyQuestionJob) -> float:  # type: ignore[no-untyped-def]
    """Skip the job mid-call; seconds until the LLM server sees its stream closed."""
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the LLM call")
    skipped = time.monotonic()
    assert operations.skip([job.pk]).skipped == [job.pk]
    wait_for(lambda: llm_server.stats()["active"] == 0, timeout=30, what="the stream to close")
    return time.monotonic() - skipped


@pytest.mark.postgres
def test_skipping_a_running_job_stops_its_llm_call_at_once(consumers, llm_server):
    """PostgreSQL: the consumer LISTENs; the skip's NOTIFY cancels the call and the stream is
    closed, so the server stops generating. No heartbeat comes in the time allowed (the
    first is due after 120 s, the reply takes 60 s), so only the NOTIFY can have done it."""
    llm_server.configure(fault="slow", slow_seconds=60)  # a long reply
    (question_id,) = bulk_jobs(1)
    job = StudyQuestionJob.objects.get(study_question_id=question_id)
    proc = consumers("--worker-id", "cancel", HEARTBEAT_SECONDS=120, LLM_TIMEOUT_SECONDS=90)
    wait_for(lambda: "study_listen_ready" in log_text(proc), what="LISTEN to be set up")
    elapsed = _closed_after_skip(llm_server, job)  # waits at most 30 s, before any heartbeat
    print(f"skip_to_stream_closed_s={elapsed:.3f}")
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("skipped", "operator_skipped")
    assert llm_server.stats()["completed_per_question"] == {}, "no reply was finished"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "study_job_cancel_requested id=" in log_text(proc)


def test_skipping_a_running_job_stops_its_call_within_a_heartbeat(consumers, llm_server):
    """Any database (SQLite has no NOTIFY): the next heartbeat finds the claim gone."""
    llm_server.configure(fault="slow", slow_seconds=60)
    (question_id,) = bulk_jobs(1)
    job = StudyQuestionJob.objects.get(study_question_id=question_id)
    consumers("--drain", "--worker-id", "beat", HEARTBEAT_SECONDS=1, LLM_TIMEOUT_SECONDS=90)
    # The reply takes 60 s; the stream closes within the 30 s the helper waits: a heartbeat
    # found the claim gone and cancelled the call.
    elapsed = _closed_after_skip(llm_server, job)
    print(f"skip_to_stream_closed_s={elapsed:.3f} (heartbeat 1 s)")
    job.refresh_from_db()
    assert job.status == "skipped"


@pytest.mark.postgres
def test_a_pause_stops_every_consumer_claiming_and_resume_restarts_them(consumers, llm_server):
    llm_server.configure(delay=0.05)
    bulk_jobs(400)
    procs = [consumers("--worker-id", f"p{i}", GATE_PERMITS=2) for i in range(2)]
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="completed").count() >= 20,
        what="some jobs done",
    )
    paused_at = timezone.now()
    pauses.pause(reason="GPU needed elsewhere", by="test")
    # Committed by now: a claim statement that starts later sees the pause and takes nothing,
    # and a claim stamps started_at before its statement starts.
    committed_at = timezone.now()
    # Whatever was claimed before the pause runs to its end; nothing is claimed after it.
    wait_for(
        lambda: not StudyQuestionJob.objects.filter(status="processing").exists(),
        timeout=30,
        what="running jobs to finish",
    )
    last_claim = StudyQuestionJob.objects.aggregate(last=Max("started_at"))["last"]
    done = StudyQuestionJob.objects.filter(status="completed").count()
    settle = time.monotonic() + 2  # an observation window: no claim may happen in it
    while time.monotonic() < settle:
        assert not StudyQuestionJob.objects.filter(started_at__gt=last_claim).exists()
        time.sleep(0.1)
    print(f"pause_to_last_claim_s={(last_claim - paused_at).total_seconds():.3f}")
    assert last_claim <= committed_at
    assert StudyQuestionJob.objects.filter(status="completed").count() == done
    assert StudyQuestionJob.objects.filter(status="pending").count() == 400 - done
    resumed = time.monotonic()
    resume()
    wait_for(
        lambda: StudyQuestionJob.objects.filter(started_at__gt=last_claim).exists(),
        timeout=10,
        what="a claim after the resume",
    )
    print(f"resume_to_first_claim_s={time.monotonic() - resumed:.3f}")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize(
    "signum", [signal.SIGHUP, signal.SIGQUIT, signal.SIGINT, signal.SIGUSR1, signal.SIGALRM]
)
def test_any_stop_signal_hands_the_running_job_back(consumers, llm_server, signum):
    """SIGHUP (the terminal closed) and the other signals that would end the process stop
    it like SIGTERM: the job whose call outlives the grace period is pending again at once,
    its attempt not counted, instead of waiting ``processing`` for the stale threshold."""
    llm_server.configure(fault="slow", slow_seconds=60)
    bulk_jobs(1)
    proc = consumers("--worker-id", "sig", SHUTDOWN_GRACE_SECONDS=0.5, LLM_TIMEOUT_SECONDS=90)
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the LLM call")
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 0, log_text(proc)
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.attempts) == ("pending", 0)
    assert job.error_message == "consumer stopped before the job finished"
    log = log_text(proc)
    assert f"study_consumer_stopping signal={signal.Signals(signum).name}" in log
    assert "study_consumer_stopped worker=sig" in log
