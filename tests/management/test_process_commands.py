"""``explain``, ``runconsumer`` and ``serve`` as real processes: a stop signal hands
``explain``'s job back, and settings far out of range stop every command before it starts."""

from __future__ import annotations

import signal
import subprocess
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from studyqueue.models import StudyQuestion, StudyQuestionJob
from tests.helpers import ROOT, wait_for
from tests.helpers.processes import bulk_jobs, finish

pytestmark = [pytest.mark.django_db(transaction=True)]


def _start(child_env, python, *args: str, **env: str) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        [python, "manage.py", *args],
        cwd=ROOT,
        env={**child_env, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_hands_explains_job_back(child_env, python, llm_server, signum):
    llm_server.configure(fault="slow", slow_seconds=60)
    (question_id,) = bulk_jobs(1)
    proc = _start(
        child_env,
        python,
        "explain",
        str(question_id),
        STUDYQUEUE_LLM_URL=llm_server.url,
        STUDYQUEUE_LLM_TIMEOUT_SECONDS="90",
    )
    try:
        wait_for(lambda: llm_server.stats()["active"] == 1, timeout=30, what="the LLM call")
        proc.send_signal(signum)
        _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    job = StudyQuestionJob.objects.get()
    assert proc.returncode == 1, err
    assert err.strip().splitlines()[-1] == (
        f"CommandError: stopped: job {job.pk} is pending again (attempt not counted), "
        "for a consumer or the next explain"
    )
    assert (job.status, job.attempts) == ("pending", 0)
    assert "Traceback" not in err
    wait_for(lambda: llm_server.stats()["active"] == 0, timeout=10, what="the call to close")


def test_explain_dry_run_with_invalid_stored_choices_is_a_one_line_error():
    question = StudyQuestion.objects.create(text="Which?")
    # What no form lets through: raw data from an old import or SQL.
    StudyQuestion.objects.filter(pk=question.pk).update(choices=["Paris", 7])
    with pytest.raises(CommandError, match=r"^question \d+ has invalid choices: Choice 2 must"):
        call_command("explain", str(question.pk), "--dry-run", stdout=StringIO())
    assert not StudyQuestionJob.objects.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting,value",
    [
        ("STALE_MINUTES", "1e12"),
        ("INTERVAL_SECONDS", "1e12"),
        ("BACKOFF_BASE_SECONDS", "1e12"),
        ("HEARTBEAT_SECONDS", "nan"),
    ],
)
@pytest.mark.parametrize(
    "command", [["runconsumer", "--once"], ["serve", "--bind", "127.0.0.1:0"], ["explain", "1"]]
)
def test_a_setting_far_out_of_range_stops_the_command_before_it_starts(
    child_env, python, llm_server, command, setting, value
):
    bulk_jobs(1)
    proc = _start(child_env, python, *command, **{f"STUDYQUEUE_{setting}": value})
    _, err = finish(proc)
    assert proc.returncode != 0
    expected = "studyqueue.E005" if value == "nan" else "studyqueue.E002"
    assert f"({expected}) STUDYQUEUE_{setting} must be" in err, err
    assert "Traceback" not in err
    assert StudyQuestionJob.objects.get().status == "pending"
    assert llm_server.stats()["requests"] == 0


@pytest.mark.slow
def test_a_killed_explains_job_goes_back_at_the_next_cycle_not_after_the_stale_timeout(
    child_env, python, llm_server, settings, make_consumer
):
    """SIGKILL gives explain no chance to hand its job back: the next consumer cycle on
    this host finds its pid gone and puts the job back at once (STALE_MINUTES is 10), and
    the consumer then runs it."""
    from tests.factories import StudyQuestionFactory

    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    llm_server.configure(fault="slow", slow_seconds=60)
    question = StudyQuestionFactory()  # no job yet: explain creates its own (claim_new)
    proc = _start(
        child_env,
        python,
        "explain",
        str(question.pk),
        STUDYQUEUE_LLM_URL=llm_server.url,
        STUDYQUEUE_LLM_TIMEOUT_SECONDS="90",
    )
    try:
        wait_for(lambda: llm_server.stats()["active"] == 1, timeout=30, what="the LLM call")
        proc.kill()  # SIGKILL
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    job = StudyQuestionJob.objects.get()
    assert job.status == "processing" and job.worker_id.startswith("explain@")
    assert job.worker_id.endswith(f":{proc.pid}")
    llm_server.configure(fault="")
    started = time.monotonic()
    result = make_consumer().run_cycle()
    print(f"killed_explain_job_back_and_done_s={time.monotonic() - started:.2f}")
    assert result.stale_reset == 1, "put back at the first cycle, not after STALE_MINUTES"
    job.refresh_from_db()
    assert job.status == "completed", job.error_message
    stale = job.attempt_log.get(outcome="stale")
    assert f"its manage.py explain process (pid {proc.pid}) is gone" in stale.error_message
