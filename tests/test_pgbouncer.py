"""Consumers behind a real PgBouncer in transaction mode (``DATABASE_POOLING=transaction``):
claims, the gate's bound (its row leases, through the pooler), the wake-up, cancel and pause
keep their guarantees, both with ``DIRECT_DATABASE_URL`` (LISTEN on a direct session) and
without it (consumers polling). The consumers are ``runconsumer`` processes; the test itself
reaches the database directly."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.db import connection

from studyqueue.checks import check_settings
from studyqueue.models import GateLease, StudyQuestionJob
from studyqueue.queue import operations
from tests.helpers import database_url, wait_for
from tests.helpers.pgbouncer import PgBouncer, available
from tests.helpers.processes import bulk_jobs, log_text, start_consumer, stop_all

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(
        not available(), reason="PgBouncer is not installed (apt-get install pgbouncer)"
    ),
]

MODES = ["direct", "pooled"]


@pytest.fixture
def bouncer() -> Iterator[PgBouncer]:
    settings = connection.settings_dict
    pooler = PgBouncer(
        settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432), settings["USER"]
    )
    yield pooler.start()
    pooler.stop()


@pytest.fixture
def pooled(
    bouncer, child_env, python, llm_server, tmp_path
) -> Iterator[Callable[..., subprocess.Popen]]:
    """``start(mode, *args, **settings)``: a ``runconsumer`` whose database is reached
    through the pooler; ``mode`` "direct" also gives it ``DIRECT_DATABASE_URL``."""
    procs: list[subprocess.Popen] = []
    name = connection.settings_dict["NAME"]

    def start(mode: str, *args: str, **settings: object) -> subprocess.Popen:
        env = {
            **child_env,
            "DATABASE_URL": bouncer.url(name),
            "DATABASE_POOLING": "transaction",
            "LOG_LEVEL": "INFO",
            "STUDYQUEUE_LLM_URL": llm_server.url,
            "STUDYQUEUE_VERIFY": "off",
            "STUDYQUEUE_KEY_AUDIT": "off",
        }
        if mode == "direct":
            env["STUDYQUEUE_DIRECT_DATABASE_URL"] = database_url(
                "postgresql", connection.settings_dict
            )
        log = tmp_path / f"consumer-{len(procs)}.log"
        procs.append(start_consumer(python, env, log, *args, **settings))
        return procs[-1]

    yield start
    stop_all(procs)


def _ready(proc: subprocess.Popen, mode: str) -> None:
    """Wait until the consumer listens (direct) or polls (pooled)."""
    line = (
        "study_listen_ready" if mode == "direct" else "study_poll_ready interval_s=1.0 mode=pooled"
    )
    wait_for(lambda: line in log_text(proc), timeout=30, what=line)


@pytest.mark.parametrize("mode", MODES)
def test_two_consumers_through_the_pooler_share_one_permit_and_claim_each_job_once(
    pooled, llm_server, mode
):
    """Two consumers at GATE_PERMITS=1 drain 12 jobs through the pooler: the server never
    has two calls at once (the gate's leases go through the pooler in both modes), and every
    job is claimed and completed once, every lease given back."""
    llm_server.configure(delay=0.15)
    ids = bulk_jobs(12)
    procs = [
        pooled(mode, "--drain", "--worker-id", f"{mode}-{i}", GATE_PERMITS=1, BATCH_SIZE=2)
        for i in range(2)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, log_text(proc)
    jobs = StudyQuestionJob.objects.filter(study_question_id__in=ids)
    assert set(jobs.values_list("status", "attempts")) == {("completed", 1)}
    assert llm_server.stats()["max_active"] == 1
    assert set(llm_server.stats()["completed_per_question"].values()) == {1}
    assert {j.worker_id for j in jobs} <= {f"{mode}-0", f"{mode}-1"}
    assert GateLease.objects.filter(holder="").count() == GateLease.objects.count() >= 1


@pytest.mark.parametrize("mode", MODES)
def test_an_idle_consumer_behind_the_pooler_wakes_for_a_new_job(pooled, llm_server, mode):
    proc = pooled(mode, "--worker-id", f"idle-{mode}", INTERVAL_SECONDS=300)
    _ready(proc, mode)
    (question,) = bulk_jobs(1)
    job = StudyQuestionJob.objects.get(study_question_id=question)
    wait_for(
        lambda: StudyQuestionJob.objects.get(pk=job.pk).status == "completed",
        timeout=15,
        what="the new job completed long before the 300 s interval",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_skip_stops_the_running_call_and_a_pause_holds_the_rest(pooled, llm_server, mode):
    """An operator's skip ends the call at once (direct: its NOTIFY) or at the next heartbeat
    (pooled); a pause keeps every other job pending until the resume."""
    llm_server.configure(fault="slow", slow_seconds=60)
    bulk_jobs(3)
    proc = pooled(
        mode,
        "--worker-id",
        f"ctl-{mode}",
        GATE_PERMITS=1,
        HEARTBEAT_SECONDS=1,
        LLM_TIMEOUT_SECONDS=90,
    )
    _ready(proc, mode)
    wait_for(lambda: llm_server.stats()["active"] == 1, timeout=20, what="the first call")
    # Claimed in id order: the first job's call runs, the next waits at the gate.
    running = StudyQuestionJob.objects.filter(status="processing").order_by("pk").first()
    assert running is not None
    call_command("pausequeue", reason="maintenance")
    started = time.monotonic()
    operations.skip([running.pk])
    wait_for(lambda: llm_server.stats()["active"] == 0, timeout=20, what="the call to stop")
    print(f"{mode}: skip_to_call_closed_s={time.monotonic() - started:.2f}")
    llm_server.configure(fault="")
    waiting = StudyQuestionJob.objects.exclude(pk=running.pk)
    wait_for(
        lambda: set(waiting.values_list("status", flat=True)) == {"pending"},
        timeout=10,
        what="a job claimed ahead handed back by the pause",
    )
    deadline = time.monotonic() + 3  # and held: no cycle claims them while paused
    while time.monotonic() < deadline:
        assert set(waiting.values_list("status", flat=True)) == {"pending"}
        time.sleep(0.2)
    call_command("resumequeue")
    wait_for(
        lambda: set(waiting.values_list("status", flat=True)) == {"completed"},
        timeout=30,
        what="the held jobs to run after the resume",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_the_checks_say_how_the_queue_keeps_its_sessions_behind_a_pooler(settings):
    entry = connection.settings_dict
    saved = entry.get("DISABLE_SERVER_SIDE_CURSORS")
    entry["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        settings.STUDYQUEUE = {"DIRECT_DATABASE_URL": ""}
        assert [m.id for m in check_settings()] == ["studyqueue.W004"]
        settings.STUDYQUEUE = {"DIRECT_DATABASE_URL": "mysql://u@h/db"}
        assert [m.id for m in check_settings()] == ["studyqueue.E010"]
        settings.STUDYQUEUE = {"DIRECT_DATABASE_URL": "postgres://u:s3cret@h:5432/db"}
        problems = check_settings()
        assert problems == [] and "s3cret" not in str(problems)
    finally:
        entry["DISABLE_SERVER_SIDE_CURSORS"] = saved
