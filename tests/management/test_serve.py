"""``manage.py serve`` (what ``make run`` starts) as a real process: web server and consumer
together, both stopped by one signal; an operator account from Django's environment
variables; a web server that cannot start stops the whole command; no public bind address
with the published SECRET_KEY."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from django.contrib.auth.models import User

from studyqueue.models import StudyQuestionJob
from tests.helpers import ROOT, wait_for
from tests.helpers.processes import bulk_jobs, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def serve(child_env, python, bind: str, *args: str, **env: str) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    base = {k: v for k, v in child_env.items() if k != "SECRET_KEY"}
    return subprocess.Popen(
        [python, "manage.py", "serve", "--bind", bind, "--web-workers", "1", *args],
        cwd=ROOT,
        env={**base, "LOG_LEVEL": "INFO", **env},
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
        _, err = finish(proc)
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


def test_without_an_account_or_a_terminal_it_says_how_to_make_one(child_env, python, free_port):
    proc = serve(child_env, python, f"127.0.0.1:{free_port}")
    try:
        assert proc.stdout is not None
        assert "run 'manage.py createsuperuser'" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert proc.returncode == 0


def test_a_second_serve_on_a_taken_port_says_so_at_once_and_starts_nothing(
    child_env, python, free_port
):
    """A second ``make run`` while the first one serves: it names the taken address and
    ends non-zero before it starts a consumer or prints the other instance's URL."""
    bind = f"127.0.0.1:{free_port}"
    first = serve(child_env, python, bind)
    try:
        assert first.stdout is not None
        first.stdout.readline()  # the account line: it serves
        wait_for(lambda: _listening(free_port), timeout=30, what="the first serve's site")
        started = time.monotonic()
        second = serve(child_env, python, bind)
        out, err = finish(second, timeout=30)
        took = time.monotonic() - started
    finally:
        first.send_signal(signal.SIGTERM)
        finish(first)
    assert second.returncode != 0
    assert f"{bind} is already in use (another make run, or another program)" in err, err
    assert "Admin:" not in out and "Consumer " not in out, out
    assert "study_consumer_started" not in err, "no consumer started"
    assert took < 15, f"it said so after {took:.1f}s"


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "bind", ["0.0.0.0:{port}", "[::]:{port}", ":{port}", "{lan}:{port}", "{name}:{port}"]
)
def test_a_public_bind_address_with_the_builtin_secret_key_is_refused(
    child_env, python, free_port, bind
):
    """The published key signs sessions: whoever reaches the port could forge them (a
    "Host: localhost" header passes ALLOWED_HOSTS), so serve does not start."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # sends nothing: picks the outgoing address
        except OSError:
            pytest.skip("no network route on this machine")
        lan = probe.getsockname()[0]
    # A host name other than localhost counts as public, whatever it resolves to.
    address = bind.format(port=free_port, lan=lan, name=socket.gethostname())
    proc = serve(child_env, python, address)
    out, err = finish(proc)
    assert proc.returncode != 0
    assert err.strip().splitlines() == [
        f"CommandError: refusing to serve on {address} with the built-in development "
        "SECRET_KEY: set SECRET_KEY (and ALLOWED_HOSTS) to serve beyond this machine, or "
        "bind to 127.0.0.1"
    ]
    assert out == ""
    assert not _listening(free_port)


def test_a_public_bind_address_with_its_own_secret_key_serves(child_env, python, free_port):
    proc = serve(child_env, python, f"0.0.0.0:{free_port}", SECRET_KEY="k" * 50)
    try:
        wait_for(lambda: _listening(free_port), timeout=30, what="the web server")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
def test_a_stop_signal_ends_the_web_server_and_hands_the_running_job_back(
    child_env, python, free_port, llm_server, signum
):
    """SIGHUP (the terminal closed) like SIGTERM: gunicorn ends too, so the port is free,
    and the job whose LLM call is running is back to pending, its attempt not counted."""
    llm_server.configure(fault="slow", slow_seconds=60)
    bulk_jobs(1)
    proc = serve(
        child_env,
        python,
        f"127.0.0.1:{free_port}",
        STUDYQUEUE_LLM_URL=llm_server.url,
        STUDYQUEUE_SHUTDOWN_GRACE_SECONDS="0.5",
        STUDYQUEUE_LLM_TIMEOUT_SECONDS="90",
    )
    try:
        wait_for(lambda: _listening(free_port), timeout=30, what="the web server")
        wait_for(lambda: llm_server.stats()["active"] == 1, timeout=30, what="the LLM call")
        proc.send_signal(signum)
        _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"study_consumer_stopping signal={signal.Signals(signum).name}" in err
    assert not _listening(free_port), "gunicorn still serves after serve ended"
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.attempts, job.worker_id) == ("pending", 0, job.worker_id)
    assert job.error_message == "consumer stopped before the job finished"


def test_sigkill_of_serve_still_ends_the_web_server(child_env, python, free_port):
    """serve cannot clean up after SIGKILL: gunicorn sees the end of serve's pipe and
    stops by itself."""
    proc = serve(child_env, python, f"127.0.0.1:{free_port}")
    try:
        wait_for(lambda: _listening(free_port), timeout=30, what="the web server")
        proc.kill()
        proc.wait(timeout=10)
        wait_for(lambda: not _listening(free_port), timeout=30, what="gunicorn to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_an_account_from_username_and_password_alone(child_env, python, free_port):
    """Django's createsuperuser wants DJANGO_SUPERUSER_EMAIL too; serve does not."""
    env = {k: v for k, v in child_env.items() if k != "DJANGO_SUPERUSER_EMAIL"}
    proc = serve(
        env,
        python,
        f"127.0.0.1:{free_port}",
        DJANGO_SUPERUSER_USERNAME="op",
        DJANGO_SUPERUSER_PASSWORD="pw-0123456789",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc)
    assert line == f"Admin: http://127.0.0.1:{free_port}/admin/ (log in as 'op')", err
    user = User.objects.get(username="op")
    assert (user.is_superuser, user.is_staff, user.email) == (True, True, "")
    assert user.has_usable_password()


@pytest.mark.parametrize("staff,active", [(False, True), (True, False)])
def test_an_existing_account_that_cannot_log_in_is_named(
    child_env, python, free_port, staff, active
):
    User.objects.create_user("bob", password="old-password-1", is_staff=staff, is_active=active)
    proc = serve(
        child_env,
        python,
        f"127.0.0.1:{free_port}",
        DJANGO_SUPERUSER_USERNAME="bob",
        DJANGO_SUPERUSER_PASSWORD="pw-0123456789",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert "log in as 'bob'" not in line
    assert "user 'bob' exists but is not an active staff member" in line
    bob = User.objects.get(username="bob")
    assert (bob.is_staff, bob.is_active, bob.is_superuser) == (staff, active, False)


def test_serve_ends_only_once_nothing_of_the_web_server_holds_its_port(
    child_env, python, free_port, tmp_path
):
    """gunicorn's master may exit before a worker it SIGKILLed is gone, and that worker
    still holds the listening socket: a restart right after serve ends would meet "address
    in use". Here a process of gunicorn's own outlives the master holding the port
    (``tests.helpers.lingering_web``); serve ends only once it is gone."""
    pidfile = tmp_path / "lingering.pid"
    proc = serve(
        child_env,
        python,
        f"127.0.0.1:{free_port}",
        DJANGO_SETTINGS_MODULE="tests.helpers.lingering_settings",
        STUDYQUEUE_TEST_LINGER_PIDFILE=str(pidfile),
    )
    try:
        wait_for(lambda: _listening(free_port), timeout=30, what="the web server")
        wait_for(pidfile.exists, timeout=30, what="the lingering process")
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc)
        assert proc.returncode == 0, err
        assert not _listening(free_port), "a process of gunicorn still holds the port"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_the_start_up_lines_say_whether_the_llm_server_answers(
    child_env, python, free_port, llm_server
):
    """One quick look at start-up: a refused port is said at once (the consumer starts all
    the same), a server that answers is said too."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refused = sock.getsockname()[1]  # closed again: connections are refused
    for url, expected in (
        (
            f"http://127.0.0.1:{refused}/v1",
            f"LLM server: no answer at http://127.0.0.1:{refused}/v1 (",
        ),
        (llm_server.url, f"LLM server: {llm_server.url} answers."),
    ):
        proc = serve(child_env, python, f"127.0.0.1:{free_port}", STUDYQUEUE_LLM_URL=url)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("Admin: ")
            assert proc.stdout.readline() == (
                "Sessions API: off (set STUDYQUEUE_API_TOKENS and restart to turn it on).\n"
            )
            line = proc.stdout.readline()
            assert line.startswith(expected), line
            assert "Ctrl-C stops" in proc.stdout.readline()  # the consumer started
        finally:
            proc.send_signal(signal.SIGTERM)
            finish(proc)
        assert proc.returncode == 0


@pytest.mark.parametrize("skip_checks", [False, True])
def test_a_url_without_v1_is_said_once_at_start(
    child_env, python, free_port, llm_server, skip_checks
):
    """The system checks say it (studyqueue.W005), so the start-up line only points there;
    with --skip-checks the start-up line says it all."""
    root = llm_server.url.removesuffix("/v1")
    args = ["--skip-checks"] if skip_checks else []
    proc = serve(child_env, python, f"127.0.0.1:{free_port}", *args, STUDYQUEUE_LLM_URL=root)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]
        while "Ctrl-C stops" not in lines[-1] and len(lines) < 6:  # the consumer started
            lines.append(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = finish(proc)
    said = "".join(lines) + out + err
    assert said.count(f"did you mean {llm_server.url}?") == 1, said
    assert ("(studyqueue.W005)" in err) is not skip_checks
    if not skip_checks:
        pointer = (
            f"LLM server: {root} answers, but not where the calls go: see studyqueue.W005 above."
        )
        assert f"{pointer}\n" in lines, lines


def test_the_start_up_lines_name_each_server_of_a_pool(child_env, python, free_port, llm_server):
    """Two servers, one down: a line each, and the down one's says the other takes its jobs;
    the sessions API is on and says where."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refused = sock.getsockname()[1]
    dead = f"http://127.0.0.1:{refused}/v1"
    proc = serve(
        child_env,
        python,
        f"127.0.0.1:{free_port}",
        STUDYQUEUE_LLM_URL=f"{llm_server.url},{dead}",
        STUDYQUEUE_API_TOKENS="tok-1,tok-2",
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("Admin: ")
        assert proc.stdout.readline() == (
            f"Sessions API: on at http://127.0.0.1:{free_port}/studyqueue/api/sessions.\n"
        )
        assert proc.stdout.readline() == f"LLM server: {llm_server.url} answers.\n"
        line = proc.stdout.readline()
        assert line.startswith(f"LLM server: no answer at {dead} (") and line.endswith(
            "the other servers take the jobs until it answers.\n"
        ), line
        assert "Ctrl-C stops" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert proc.returncode == 0


def test_a_bare_port_binds_localhost_and_ignored_variables_are_named(
    child_env, python, free_port, llm_server
):
    """STUDYQUEUE_BIND=8751 serves on 127.0.0.1:8751 (it used to be refused for want of a
    SECRET_KEY); LLM_URL and PORT, which nothing reads, are named with the right names."""
    proc = serve(
        child_env,
        python,
        str(free_port),
        STUDYQUEUE_LLM_URL=llm_server.url,
        LLM_URL="http://127.0.0.1:1/v1",
        PORT="8751",
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"Admin: http://127.0.0.1:{free_port}/admin/"), line
    finally:
        proc.send_signal(signal.SIGTERM)
        _, errors = finish(proc)
    assert proc.returncode == 0
    assert (
        "LLM_URL is set in the environment but studyqueue does not read it: set "
        "STUDYQUEUE_LLM_URL" in errors
    )
    assert (
        "PORT is set in the environment but studyqueue does not read it: set "
        "STUDYQUEUE_BIND" in errors
    )
