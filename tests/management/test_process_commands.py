"""``explain``, ``runconsumer`` and ``serve`` as real processes: a stop signal hands
``explain``'s job back, and settings far out of range stop every command before it starts."""

from __future__ import annotations

import signal
import subprocess
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
