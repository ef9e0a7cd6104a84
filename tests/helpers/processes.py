"""Helpers for tests that run runconsumer as real processes."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from studyqueue.models import StudyQuestion
from studyqueue.queue.enqueue import enqueue_many
from tests.helpers import ROOT


def start_consumer(
    python: str, env: dict[str, str], log: Path, *args: str, **settings: object
) -> subprocess.Popen:
    """A ``runconsumer`` process with ``env`` and ``settings`` as STUDYQUEUE_<NAME>
    variables, logging to ``log`` (``log_text``); in a session of its own."""
    env = {**env, **{f"STUDYQUEUE_{key}": str(value) for key, value in settings.items()}}
    # SIGABRT (not a stop signal) then prints every thread's stack to the log (``stop_all``).
    env["PYTHONFAULTHANDLER"] = "1"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [python, "manage.py", "runconsumer", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    proc.log = log  # type: ignore[attr-defined]
    return proc


@contextmanager
def api_under_gunicorn(python: str, env: dict[str, str], bind: str, token: str) -> Iterator[None]:
    """The project served by gunicorn at ``bind`` with the sessions API open to ``token``,
    stopped when the block ends (the caller waits until it answers)."""
    web = subprocess.Popen(
        [python, "-m", "gunicorn", "project.wsgi:application", "--bind", bind],
        cwd=ROOT,
        env={**env, "STUDYQUEUE_API_TOKENS": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        web.terminate()
        web.wait(timeout=30)


def stop_all(procs: list[subprocess.Popen]) -> None:
    """Stop those still running (a test's teardown): SIGABRT, which prints where each of
    their threads was into the log (shown with a failing test), then SIGKILL."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGABRT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            if hasattr(proc, "log"):
                print(f"--- {proc.log} (stopped at teardown) ---\n{log_text(proc)[-20000:]}")


def log_text(proc: subprocess.Popen) -> str:
    """Everything a consumer started by the ``consumers`` fixture logged so far."""
    return Path(proc.log).read_text()  # type: ignore[attr-defined]


def bulk_jobs(n: int, text: str = "question {i}") -> list[int]:
    """``n`` new questions with one pending explanation job each; their ids."""
    StudyQuestion.objects.bulk_create(StudyQuestion(text=text.format(i=i)) for i in range(n))
    ids = list(StudyQuestion.objects.order_by("-pk").values_list("pk", flat=True)[:n])
    assert enqueue_many(ids) == n
    return ids


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """Wait for a command's process to end: its (stdout, stderr); killed if it overstays."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
