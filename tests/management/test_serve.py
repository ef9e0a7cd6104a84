"""``manage.py serve`` (what ``make run`` starts) as a real process: web server and consumer
together, both stopped by one signal; an operator account from Django's environment
variables; a web server that cannot start stops the whole command."""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request

import pytest
from django.contrib.auth.models import User

from tests.helpers import ROOT, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def serve(child_env, python, bind: str, **env: str) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        [python, "manage.py", "serve", "--bind", bind, "--web-workers", "1"],
        cwd=ROOT,
        env={**child_env, "LOG_LEVEL": "INFO", **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_serve_runs_site_and_consumer_and_sigterm_stops_both(child_env, python, free_port):
    bind = f"127.0.0.1:{free_port}"
    proc = serve(
        child_env,
        python,
        bind,
        DJANGO_SUPERUSER_USERNAME="op",
        DJANGO_SUPERUSER_PASSWORD="pw-0123456789",
        DJANGO_SUPERUSER_EMAIL="op@example.com",
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"Admin: http://{bind}/admin/ (log in as 'op')"
        css = f"http://{bind}/static/admin/css/base.css"
        content_type = wait_for(lambda: _get(css), timeout=30, what="the web server")
        assert content_type.startswith("text/css")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = _finish(proc)
    assert proc.returncode == 0, err
    assert "study_consumer_started" in err and "study_consumer_stopped" in err
    assert User.objects.get(username="op").is_superuser


def _get(url: str) -> str | None:
    """The Content-Type of a GET, or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.headers["Content-Type"]
    except OSError:
        return None


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_without_an_account_or_a_terminal_it_says_how_to_make_one(child_env, python, free_port):
    proc = serve(child_env, python, f"127.0.0.1:{free_port}")
    try:
        assert proc.stdout is not None
        assert "run 'manage.py createsuperuser'" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _finish(proc)
    assert proc.returncode == 0


def test_a_web_server_that_cannot_start_stops_the_command(child_env, python):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve(child_env, python, f"127.0.0.1:{port}")
        _, err = _finish(proc)
    assert proc.returncode != 0
    assert "the web server stopped with exit code" in err
    assert "study_consumer_stopped" in err
