"""Fault injection against real runconsumer processes on PostgreSQL.

Many consumers, SIGKILL at random moments, database connections killed, an LLM outage and a
poison job: every job ends completed exactly once (or, for the poison job, failed), none is
lost or left processing. Each test prints the figures it checked.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections import Counter

import pytest
from django.db import connection

from studyqueue.models import StudyQuestionJob
from tests.helpers import wait_for
from tests.helpers.processes import bulk_jobs, log_text

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.chaos,
    pytest.mark.slow,
]

# Short clocks so that recovery happens within the test: a dead worker's job is stale
# after 3 s; the LLM timeout stays below that (the W001 check).
FAST = {
    "INTERVAL_SECONDS": 0.5,
    "HEARTBEAT_SECONDS": 0.3,
    "STALE_MINUTES": 0.05,
    "LLM_TIMEOUT_SECONDS": 2,
    "BREAKER_BASE_SECONDS": 0.2,
    "BREAKER_MAX_SECONDS": 1,
    "BACKOFF_BASE_SECONDS": 0.2,
    "SHUTDOWN_GRACE_SECONDS": 5,
}


@pytest.fixture(autouse=True)
def explanation_writes():
    """Count every committed write of a question's explanation, in the database itself.

    A trigger records each UPDATE of the explanation column; a rolled-back write rolls its
    record back too, so the table holds exactly the writes that happened.
    """
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE chaos_writes (question_id bigint NOT NULL)")
        cur.execute(
            "CREATE FUNCTION chaos_count_write() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO chaos_writes VALUES (NEW.id); RETURN NEW; END $$"
        )
        cur.execute(
            "CREATE TRIGGER chaos_write AFTER UPDATE OF explanation"
            " ON studyqueue_studyquestion FOR EACH ROW EXECUTE FUNCTION chaos_count_write()"
        )
    yield
    with connection.cursor() as cur:
        cur.execute("DROP TRIGGER chaos_write ON studyqueue_studyquestion")
        cur.execute("DROP FUNCTION chaos_count_write()")
        cur.execute("DROP TABLE chaos_writes")


def writes_per_question() -> Counter:
    with connection.cursor() as cur:
        cur.execute("SELECT question_id, count(*) FROM chaos_writes GROUP BY question_id")
        return Counter(dict(cur.fetchall()))


def wait_all_finished(n: int, timeout: float) -> float:
    started = time.monotonic()
    wait_for(
        lambda: (
            StudyQuestionJob.objects.filter(status__in=["completed", "failed", "skipped"]).count()
            == n
        ),
        timeout=timeout,
        interval=0.2,
        what=f"{n} jobs to finish",
    )
    return time.monotonic() - started


def stop_all(procs) -> None:  # type: ignore[no-untyped-def]
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=30)


def assert_each_completed_once(ids: list[int], llm_server) -> dict:  # type: ignore[no-untyped-def]
    jobs = StudyQuestionJob.objects.filter(study_question_id__in=ids)
    statuses = Counter(jobs.values_list("status", flat=True))
    writes = writes_per_question()
    doubled = [q for q in ids if writes[q] > 1]
    lost = [q for q in ids if writes[q] == 0]
    stats = llm_server.stats()
    figures = {
        "jobs": len(ids),
        "completed": statuses["completed"],
        "duplicates": len(doubled),
        "lost": len(lost),
        "llm_requests": stats["requests"],
        "llm_repeats": sum(n - 1 for n in stats["per_question"].values() if n > 1),
    }
    assert jobs.count() == len(ids), "one job row per question"
    assert statuses == {"completed": len(ids)}, statuses
    assert doubled == [] and lost == [], (doubled[:5], lost[:5])
    assert len(stats["per_question"]) == len(ids), "the LLM saw every question"
    return figures


def test_four_consumers_complete_2000_jobs_exactly_once(consumers, llm_server, settings):
    llm_server.configure(delay=0.002, capacity=4)
    ids = bulk_jobs(2000)
    # No fault here: a loaded machine must not make one. With FAST's 3 s stale threshold and
    # 2 s call timeout, a stalled heartbeat or a call queued behind three others reran a job.
    calm = {**FAST, "STALE_MINUTES": 1, "LLM_TIMEOUT_SECONDS": 30}
    procs = [consumers("--worker-id", f"c{i}", GATE_PERMITS=4, **calm) for i in range(4)]
    elapsed = wait_all_finished(2000, timeout=240)
    stop_all(procs)
    figures = assert_each_completed_once(ids, llm_server)
    per_worker = Counter(StudyQuestionJob.objects.values_list("worker_id", flat=True))
    print(f"{figures} elapsed_s={elapsed:.1f} per_worker={dict(per_worker)}")
    assert figures["llm_repeats"] == 0, "no fault, so no question is asked twice"
    assert len(per_worker) == 4, "all four consumers took jobs"
    assert llm_server.stats()["max_active"] <= 4


def test_sigkill_twenty_times_loses_and_doubles_nothing(consumers, llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 10}
    llm_server.configure(delay=0.03)
    ids = bulk_jobs(500)
    rng = random.Random(20261130)
    alive = [consumers("--worker-id", f"k{i}", GATE_PERMITS=2, **FAST) for i in range(3)]
    everyone = list(alive)
    kills = 0
    while kills < 20:
        time.sleep(rng.uniform(0.1, 0.5))  # a random moment, not a synchronisation
        victim = alive.pop(rng.randrange(len(alive)))
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        kills += 1
        fresh = consumers("--worker-id", f"k{len(everyone)}", GATE_PERMITS=2, **FAST)
        alive.append(fresh)
        everyone.append(fresh)
    elapsed = wait_all_finished(500, timeout=180)
    stop_all(alive)
    figures = assert_each_completed_once(ids, llm_server)
    attempts = Counter(StudyQuestionJob.objects.values_list("attempts", flat=True))
    print(
        f"{figures} kills={kills} finish_after_last_kill_s={elapsed:.1f} attempts={dict(attempts)}"
    )
    assert not StudyQuestionJob.objects.filter(status="processing").exists()


def _kill_consumer_connections() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cur.fetchone()[0]


def test_database_connections_killed_mid_run(consumers, llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 10}
    llm_server.configure(delay=0.01)
    ids = bulk_jobs(400)
    procs = [consumers("--worker-id", f"d{i}", GATE_PERMITS=2, **FAST) for i in range(2)]
    killed = []
    for _ in range(5):
        # Between two kills the consumers get back into their stride: 20 more calls.
        target = llm_server.stats()["requests"] + 20
        wait_for(lambda t=target: llm_server.stats()["requests"] >= t, what="the consumers to work")
        killed.append(_kill_consumer_connections())
    elapsed = wait_all_finished(400, timeout=180)
    assert all(proc.poll() is None for proc in procs), "consumers survive losing the database"
    stop_all(procs)
    figures = assert_each_completed_once(ids, llm_server)
    logs = "".join(log_text(p) for p in procs)
    print(f"{figures} connections_killed={killed} finish_after_last_kill_s={elapsed:.1f}")
    assert sum(killed) >= 5
    noticed = re.findall(
        r"study_(?:consumer_db_error|consumer_cycle_failed|heartbeat_failed|listen_failed)", logs
    )
    assert noticed, "the consumers log losing the database"


def test_llm_outage_burns_no_attempts(consumers, llm_server):
    llm_server.configure(delay=0.01)
    ids = bulk_jobs(200)
    procs = [consumers("--worker-id", f"o{i}", GATE_PERMITS=2, **FAST) for i in range(2)]
    wait_for(
        lambda: StudyQuestionJob.objects.filter(status="completed").count() >= 20,
        what="some jobs done before the outage",
    )
    port = llm_server.port
    llm_server.stop()  # the LLM server goes away: connections are refused
    outage_started = time.monotonic()
    time.sleep(3)  # the outage lasts a while (consumers keep trying)
    during = StudyQuestionJob.objects.filter(status="completed").count()
    from tests.llm_server import LLMServer

    revived = LLMServer(port=port).start()
    revived.configure(delay=0.01)
    try:
        recovered = wait_all_finished(200, timeout=120)
    finally:
        stop_all(procs)
        revived.stop()
    statuses = Counter(StudyQuestionJob.objects.values_list("status", flat=True))
    attempts = Counter(StudyQuestionJob.objects.values_list("attempts", flat=True))
    logs = "".join(log_text(p) for p in procs)
    outage = time.monotonic() - outage_started
    print(
        f"jobs=200 completed_before_restart={during} outage_s={outage:.1f}"
        f" backlog_finished_after_restart_s={recovered:.1f} statuses={dict(statuses)}"
        f" attempts={dict(attempts)}"
    )
    assert statuses == {"completed": 200}, "no job failed because of the outage"
    assert set(attempts) == {1}, "no attempt was burned for the outage"
    assert "study_llm_paused error_code=llm_unavailable" in logs
    assert len(ids) == 200


def test_a_poison_job_fails_without_holding_up_the_rest(consumers, llm_server):
    llm_server.configure(delay=0.01)
    bulk_jobs(1, text="FAULT:500 poison {i}")  # the server answers 500 to this one, always
    others = bulk_jobs(150)
    started = time.monotonic()
    procs = [consumers("--worker-id", f"p{i}", GATE_PERMITS=2, **FAST) for i in range(2)]
    wait_for(
        lambda: (
            StudyQuestionJob.objects.filter(
                study_question_id__in=others, status="completed"
            ).count()
            == 150
        ),
        timeout=120,
        what="the other jobs",
    )
    others_done = time.monotonic() - started
    wait_all_finished(151, timeout=60)
    stop_all(procs)
    poison = StudyQuestionJob.objects.exclude(study_question_id__in=others).get()
    requests = llm_server.stats()["per_question"]
    poison_requests = sum(n for q, n in requests.items() if q.startswith("FAULT:500"))
    print(
        f"others=150 others_done_s={others_done:.1f} poison_status={poison.status}"
        f" poison_attempts={poison.attempts} poison_requests={poison_requests}"
    )
    assert (poison.status, poison.error_code, poison.attempts) == ("failed", "llm_server_error", 3)
    assert poison_requests == 3
