"""runconsumer as a real process while its LLM server is down: it waits, it does not spin."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from studyqueue.models import StudyQuestionJob
from tests.helpers import wait_for
from tests.helpers.processes import bulk_jobs, log_text
from tests.llm_server import LLMServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The bar: 20 s of outage, at most 12 cycles and 3 s of CPU. The breaker's pauses
# double (2, 4, 8, 16 s with the defaults), so the first 10 s hold at least half of the
# cycles of 20 s: half the bars over 10 s is the same rate, or stricter.
OUTAGE_SECONDS = 10.0
MAX_CYCLES = 6
MAX_CPU_SECONDS = 1.5


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / 100.0  # USER_HZ is 100 on Linux


def cycles(proc: subprocess.Popen) -> int:
    return log_text(proc).count("study_consumer_cycle ")


@pytest.mark.parametrize("mode", ["scheduled", "--drain"])
def test_a_consumer_whose_llm_is_down_waits_for_the_breaker_instead_of_spinning(
    consumers, free_port, mode
):
    """SQLite or PostgreSQL, default settings, 5 pending jobs, the LLM's port closed. Its probes
    are logged at DEBUG: the terminal (INFO) hears of the outage once, not every few seconds."""
    bulk_jobs(5)
    args = ["--drain"] if mode == "--drain" else []
    url = f"http://127.0.0.1:{free_port}/v1"
    proc = consumers(*args, "--worker-id", "outage", log_level="DEBUG", LLM_URL=url)
    wait_for(lambda: cycles(proc) >= 1, what="the first cycle")
    cpu_before, cycles_before, log_before = cpu_seconds(proc.pid), cycles(proc), log_text(proc)
    started = time.monotonic()
    time.sleep(OUTAGE_SECONDS)  # the observation window itself, not a synchronisation
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(proc.pid) - cpu_before
    cycles_run = cycles(proc) - cycles_before
    log = log_text(proc)[len(log_before) :]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    print(
        f"outage_s={elapsed:.1f} cycles={cycles_run} cpu_s={cpu:.2f} "
        f"log_lines={log.count(chr(10))} log_bytes={len(log)}"
    )
    assert cycles_run <= MAX_CYCLES
    assert cpu <= MAX_CPU_SECONDS
    # Once per pause, the reason and the length of the wait.
    pauses = re.findall(r"study_llm_paused .*pause_s=([\d.]+)", log)
    waits = re.findall(r"study_consumer_waiting .*reason=llm_paused .*wait_s=([\d.]+)", log)
    assert pauses and waits and abs(len(waits) - len(pauses)) <= 1
    # Said once, at the first failure (before the window): nothing at INFO or above since.
    assert "level=WARNING logger=studyqueue.breaker study_llm_paused" in log_before
    shown = [line for line in log.splitlines() if "level=DEBUG" not in line]
    assert shown == [], shown
    assert StudyQuestionJob.objects.filter(status="pending", attempts=0).count() == 5


def test_jobs_resume_within_one_breaker_pause_when_the_server_comes_back(consumers, free_port):
    bulk_jobs(5)
    proc = consumers(
        "--worker-id",
        "back",
        log_level="DEBUG",
        LLM_URL=f"http://127.0.0.1:{free_port}/v1",
        BREAKER_BASE_SECONDS=1,
        BREAKER_MAX_SECONDS=3,
    )
    wait_for(lambda: log_text(proc).count("study_llm_paused ") >= 3, what="three pauses")
    server = LLMServer(port=free_port).start()
    back = time.monotonic()
    try:
        wait_for(
            lambda: StudyQuestionJob.objects.filter(status="completed").count() == 5,
            timeout=30,
            what="every job done once the server is back",
        )
        recovery = time.monotonic() - back
    finally:
        server.stop()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    print(f"server_back_to_all_done_s={recovery:.2f} (breaker pause at most 3 s)")
    assert recovery < 3 + 3.0  # one pause, plus a margin for a loaded machine
    assert set(StudyQuestionJob.objects.values_list("attempts", flat=True)) == {1}


def test_with_the_default_breaker_jobs_resume_seconds_after_the_server_is_back(
    consumers, free_port
):
    """The default BREAKER_* settings, the server down long enough for the doubling pauses
    to pass 5 s (2, 4, 8 s: they used to reach 16 and 32 s, and a restarted server waited
    half a minute for its jobs): after a refused connection the pause stops at 5 s."""
    bulk_jobs(3)
    proc = consumers(
        "--worker-id",
        "restart",
        log_level="DEBUG",
        LLM_URL=f"http://127.0.0.1:{free_port}/v1",
        BREAKER_BASE_SECONDS=2,
        BREAKER_MAX_SECONDS=60,
    )
    wait_for(lambda: log_text(proc).count("study_llm_paused ") >= 4, timeout=60, what="four pauses")
    server = LLMServer(port=free_port).start()
    back = time.monotonic()
    try:
        wait_for(
            lambda: StudyQuestionJob.objects.filter(status="completed").count() == 3,
            timeout=60,
            what="every job done once the server is back",
        )
        recovery = time.monotonic() - back
    finally:
        server.stop()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    pauses = [float(p) for p in re.findall(r"study_llm_paused .*pause_s=([\d.]+)", log_text(proc))]
    print(f"server_back_to_all_done_s={recovery:.2f} pauses_s={pauses}")
    assert max(pauses) <= 5.0
    assert recovery < 5 + 3.0  # at most one pause, plus a margin for a loaded machine
    assert set(StudyQuestionJob.objects.values_list("attempts", flat=True)) == {1}
