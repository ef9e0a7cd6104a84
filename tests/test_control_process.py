"""What reaches a running ``runconsumer`` process from outside: a pause (PostgreSQL's NOTIFY,
the cycle's look on SQLite), and its LISTEN connection made with the database's OPTIONS."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid

import pytest
from django.core.management import call_command
from django.db import connection

from studyqueue.models import StudyQuestionJob
from studyqueue.queue.operations import skip
from tests.helpers import ROOT, wait_for
from tests.helpers.processes import bulk_jobs, log_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_pausequeue_hands_back_at_once_the_jobs_claimed_but_not_started(consumers, llm_server):
    """Gate 1, three jobs claimed: the first one's call runs for 30 s, the others wait at
    the gate. ``pausequeue`` hands them back long before that call ends, and the LLM server
    never sees them."""
    llm_server.configure(fault="slow", slow_seconds=30)
    bulk_jobs(3)
    first, *waiting = StudyQuestionJob.objects.order_by("pk")
    proc = consumers(
        "--worker-id",
        "paused",
        GATE_PERMITS=1,
        BATCH_SIZE=3,
        LLM_TIMEOUT_SECONDS=90,
        HEARTBEAT_SECONDS=1,
    )
    if connection.vendor == "postgresql":
        wait_for(lambda: "study_listen_ready" in log_text(proc), what="LISTEN to be set up")
    wait_for(lambda: llm_server.stats()["active"] == 1, what="the first call")
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="processing").count() == 3,
        what="the other two jobs claimed, waiting at the gate",
    )
    paused = time.monotonic()
    call_command("pausequeue", reason="GPU needed elsewhere")
    wait_for(
        lambda: (
            StudyQuestionJob.objects.filter(
                pk__in=[job.pk for job in waiting], status="pending", attempts=0
            ).count()
            == 2
        ),
        timeout=20,
        what="the waiting jobs handed back",
    )
    handed_back = time.monotonic() - paused
    print(f"{connection.vendor}: pause_to_handed_back_s={handed_back:.3f}")
    assert llm_server.stats()["active"] == 1, "the first call still runs"

    skip([first.pk])  # end the first call (NOTIFY, or the next heartbeat)
    wait_for(lambda: llm_server.stats()["active"] == 0, timeout=20, what="the call to end")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert list(llm_server.stats()["per_question"]) == [first.study_question.text]
    for job in waiting:
        job.refresh_from_db()
        assert (job.status, job.attempts, job.worker_id) == ("pending", 0, "paused")
        assert "paused" in job.error_message
    assert "study_consumer_paused_jobs_handed_back worker=paused" in log_text(proc)


@pytest.mark.postgres
def test_the_listener_connects_with_the_database_options(child_env, python, llm_server, tmp_path):
    """DATABASE_URL's query string becomes OPTIONS (dj-database-url): the consumer's LISTEN
    connection carries them as its ORM connections do, and the wake-up works."""
    name = f"studyqueue-listen-{uuid.uuid4().hex[:8]}"
    env = {
        **child_env,
        "DATABASE_URL": f"{child_env['DATABASE_URL']}?application_name={name}",
        "STUDYQUEUE_LLM_URL": llm_server.url,
        "STUDYQUEUE_INTERVAL_SECONDS": "120",
        "LOG_LEVEL": "INFO",
    }
    log = tmp_path / "consumer.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [python, "manage.py", "runconsumer", "--worker-id", "options"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "study_listen_ready" in log.read_text(), what="LISTEN to be set up")

        def listen_queries() -> list[str]:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT query FROM pg_stat_activity WHERE application_name = %s"
                    " AND query LIKE 'LISTEN %%'",
                    [name],
                )
                return [row[0] for row in cursor.fetchall()]

        assert wait_for(listen_queries, timeout=10, what="a LISTEN connection named by OPTIONS")
        (question,) = bulk_jobs(1)
        wait_for(
            lambda: StudyQuestionJob.objects.get(study_question_id=question).status == "completed",
            timeout=15,
            what="the wake-up (the poll is 120 s away)",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
