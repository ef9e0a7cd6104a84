"""Health: the command and the two endpoints, passing and failing for each reason; the LLM
probe bounded against hostile servers; the URLs the live consumers use; no key ever shown."""

from __future__ import annotations

import json
import re
import threading
import time
import tracemalloc
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from studyqueue.models import QueueConsumer, StudyQuestionJob
from studyqueue.monitoring import health
from studyqueue.services.llm import PROBE_DEADLINE_SECONDS
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.hostile_llm import HostileServer
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_remembered_probes(monkeypatch):
    # readyz remembers its probes per set of URLs: each test starts with none.
    monkeypatch.setattr(health, "_cache", health._ProbeCache())


@pytest.fixture
def hostile(settings):
    """``hostile(mode, **settings)``: a hostile server as this process's LLM_URL."""
    servers: list[HostileServer] = []

    def start(mode: str, **overrides: object) -> HostileServer:
        server = HostileServer(mode).start()
        servers.append(server)
        settings.STUDYQUEUE = {"LLM_URL": server.url, **overrides}
        return server

    yield start
    for server in servers:
        server.stop()


def live_consumer(**fields) -> QueueConsumer:  # type: ignore[no-untyped-def]
    now = timezone.now()
    defaults = {
        "worker_id": "c1",
        "host": "h",
        "pid": 1,
        "started_at": now,
        "seen_at": now,
        "interval_seconds": 60,
        "llm_url": "http://x/v1",
    }
    return QueueConsumer.objects.create(**{**defaults, **fields})


def health_output(*args: str) -> str:
    out = StringIO()
    call_command("studyqueue_health", *args, stdout=out)
    return out.getvalue()


def health_error(*args: str) -> str:
    with pytest.raises(CommandError) as info:
        health_output(*args)
    return str(info.value)


def ready(client) -> tuple[int, dict, float]:  # type: ignore[no-untyped-def]
    """An anonymous GET /studyqueue/readyz: status, JSON body, seconds it took."""
    started = time.monotonic()
    response = client.get("/studyqueue/readyz")
    return response.status_code, json.loads(response.content), time.monotonic() - started


def test_all_healthy(llm_server):
    live_consumer(llm_url=llm_server.url)
    text = health_output()
    assert text.startswith("ok: db: the database answers and is migrated; consumer: 1 consumer")
    assert f"llm: the LLM server at {llm_server.url} (consumer c1) serves 1 model" in text


def test_each_part_fails_with_its_own_reason(settings, free_port, llm_server):
    assert health_error("--consumer").startswith("consumer: no consumer has run a cycle")
    live_consumer(seen_at=timezone.now() - timedelta(minutes=5))  # silent: 2 intervals
    assert health_error("--consumer").startswith("consumer: no consumer")
    settings.STUDYQUEUE = {"LLM_URL": f"http://user:hunter22@127.0.0.1:{free_port}/v1"}
    error = health_error("--llm")
    assert error.startswith(
        f"llm: the LLM server at http://[redacted]@127.0.0.1:{free_port}/v1 (this process's "
        "LLM_URL; no consumer is live) is unreachable: ConnectError"
    )
    assert "hunter22" not in error
    assert health_output("--db").startswith("ok: db:")


def test_an_llm_server_without_a_model_list_is_not_ready(settings, llm_server):
    settings.STUDYQUEUE = {"LLM_URL": llm_server.url.replace("/v1", "/nope")}
    assert "answered HTTP 404 without a model list" in health_error("--llm")


def test_unapplied_migrations_fail_the_db_check():
    call_command("migrate", "studyqueue", "0001_squashed_0017_job_attempts", verbosity=0)
    try:
        assert health_error("--db").startswith("db: migrations are not applied")
    finally:
        call_command("migrate", "studyqueue", verbosity=0)


def test_the_endpoints_need_no_login_and_answer_json(client, llm_server):
    live = client.get("/studyqueue/healthz")
    assert live.status_code == 200 and json.loads(live.content)["status"] == "ok"
    status, body, _ = ready(client)
    assert status == 503 and body["status"] == "fail"
    assert body["checks"]["consumer"]["ok"] is False and body["checks"]["db"]["ok"] is True
    live_consumer(llm_url=llm_server.url)
    assert ready(client)[0] == 200


# --------------------------------------------------------------------------- an invalid key

INVALID_KEYS = [
    "sk-live-0123456789abcdef\r\n",
    "sk-live-0123\r\nX-Injected: 456789abcdef",
    "sk-live-0123456789abcdéf",
    "sk-live-01234567 89abcdef",
]


def _pieces(key: str) -> list[str]:
    """The parts of ``key`` that must never show (each run of 4+ visible characters)."""
    return [piece for piece in re.findall(r"[!-~]{4,}", key) if piece != "sk-live-"] + [
        "0123",
        "89abcdef",
    ]


@pytest.mark.parametrize("key", INVALID_KEYS, ids=["crlf-end", "crlf-inside", "non-ascii", "space"])
def test_an_invalid_key_is_never_sent_or_shown_by_any_probe(hostile, client, key):
    server = hostile("echo_key", LLM_API_KEY=key)
    status, body, _ = ready(client)  # anonymous
    llm = body["checks"]["llm"]
    assert status == 503 and llm["ok"] is False
    assert "LLM_API_KEY is invalid" in llm["detail"]
    command_error = health_error("--llm")
    assert command_error.startswith(f"llm: the LLM server at {server.url} (this process's")
    assert "LLM_API_KEY is invalid" in command_error
    live_consumer(llm_url=server.url)  # a consumer on the same URL: the same answer
    consumer_view = ready(client)[1]["checks"]["llm"]["detail"]
    assert "(consumer c1) is not probed: LLM_API_KEY is invalid" in consumer_view
    for text in (json.dumps(body), llm["detail"], command_error, consumer_view):
        for piece in _pieces(key):
            assert piece not in text
    assert server.requests == 0, "the key never went out"


@pytest.mark.parametrize("key", INVALID_KEYS, ids=["crlf-end", "crlf-inside", "non-ascii", "space"])
def test_an_invalid_key_stops_every_llm_call_of_a_process(hostile, make_consumer, caplog, key):
    """The consumer (runconsumer, serve) and explain call through the same client: no request,
    "LLM_API_KEY is invalid" in the job, the command's error and the log, and no piece of it."""
    server = hostile("echo_key", LLM_API_KEY=key)
    question = StudyQuestionFactory(text="What is 2 + 2?")
    with pytest.raises(CommandError) as info:
        call_command("explain", str(question.pk), stdout=StringIO())
    assert "LLM_API_KEY is invalid" in str(info.value)
    make_consumer().run_cycle()
    job = StudyQuestionJob.objects.get(study_question=question)
    assert "LLM_API_KEY is invalid" in job.error_message
    for text in (str(info.value), job.error_message, caplog.text):
        for piece in _pieces(key):
            assert piece not in text
    assert server.requests == 0


# --------------------------------------------------------------------------- a bounded probe


TIMED_OUT = f"is unreachable: no complete answer within {PROBE_DEADLINE_SECONDS:g}s"
PROBE_CASES = {
    # mode: (llm ok, what the detail says)
    "deep_models": (
        False,
        "answered HTTP 200 without a model list (not JSON (nested deeper than 64))",
    ),
    "huge_models": (False, "answered HTTP 200 without a model list (a body over 1048576 bytes)"),
    "drip_models": (False, TIMED_OUT),
    "stall": (False, TIMED_OUT),
    "huge_json": (False, "without a model list (a body over 1048576 bytes)"),
    "gzip_bomb": (False, "without a model list (not JSON (not UTF-8))"),
    "deep_json": (False, "without a model list (not JSON (nested deeper than 64))"),
    "hangup": (False, "is unreachable: RemoteProtocolError"),
    "reset": (False, "is unreachable: "),
    "huge_error": (False, "answered HTTP 500 without a model list"),
    "echo_key": (False, "refused LLM_API_KEY (HTTP 401)"),
    "empty_models": (True, "serves 0 models (an empty body, as mlx_lm.server sends"),
}


@pytest.mark.parametrize("mode", list(PROBE_CASES))
def test_readyz_never_fails_with_500_and_answers_within_its_wait(hostile, client, mode):
    hostile(mode, LLM_API_KEY="sk-live-0123456789abcdef")
    status, body, seconds = ready(client)
    assert status == 503  # no consumer is live
    # readyz waits READY_WAIT_SECONDS for the probe, then answers; allow a loaded machine
    assert seconds < health.READY_WAIT_SECONDS + 4
    expected_ok, says = PROBE_CASES[mode]

    def answered() -> dict | None:
        llm = ready(client)[1]["checks"]["llm"]
        return None if "being probed" in llm["detail"] else llm

    llm = wait_for(
        answered,
        timeout=PROBE_DEADLINE_SECONDS + 10,
        what="the probe's answer",
    )
    assert llm["ok"] is expected_ok and says in llm["detail"], llm
    assert "0123456789abcdef" not in json.dumps(body) + llm["detail"]


def test_the_probe_deadline_covers_the_whole_request(hostile):
    """One byte every 2 s never trips a read timeout: the deadline is for the whole request."""
    hostile("drip_models")
    started = time.monotonic()
    check = health.check_llm()
    seconds = time.monotonic() - started
    assert not check.ok and "no complete answer within 3s" in check.detail
    assert PROBE_DEADLINE_SECONDS - 0.5 < seconds < PROBE_DEADLINE_SECONDS + 5


@pytest.mark.parametrize("mode", ["huge_models", "huge_json"])
def test_a_huge_model_list_is_not_held_in_memory(hostile, mode):
    server = hostile(mode)
    tracemalloc.start()
    try:
        check = health.check_llm()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not check.ok and "a body over 1048576 bytes" in check.detail
    assert peak < 16 * MB, f"peak {peak / MB:.0f} MB"
    assert server.bytes_sent < 64 * MB, "the probe stopped reading"


def test_healthz_does_no_llm_and_no_migration_work(hostile, client):
    """Liveness answers at once while the LLM server hangs and while migrations are missing:
    the LLM server sees no request from it, and it needs no migration."""
    server = hostile("drip_models")
    assert ready(client)[1]["checks"]["llm"]["ok"] is False  # a probe now hangs on the drip
    seen = server.requests
    timings = []
    for _ in range(20):
        started = time.monotonic()
        response = client.get("/studyqueue/healthz")
        timings.append(time.monotonic() - started)
        assert response.status_code == 200
    assert server.requests == seen, "healthz made no LLM request"
    assert sorted(timings)[len(timings) // 2] < 0.25, timings  # the bar is 50 ms; a loaded CI
    call_command("migrate", "studyqueue", "0001_squashed_0017_job_attempts", verbosity=0)
    try:
        response = client.get("/studyqueue/healthz")
        assert response.status_code == 200, response.content
        assert json.loads(response.content)["checks"] == {
            "db": {"ok": True, "detail": "the database answers"}
        }
    finally:
        call_command("migrate", "studyqueue", verbosity=0)


@pytest.mark.postgres
def test_healthz_answers_while_the_migration_table_is_locked(client, django_db_blocker):
    """A migration holding its lock (here: ACCESS EXCLUSIVE on django_migrations) stops
    readiness, never liveness."""
    import psycopg

    settings_dict = connection.settings_dict
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with psycopg.connect(
            dbname=settings_dict["NAME"],
            user=settings_dict["USER"],
            host=settings_dict["HOST"] or "127.0.0.1",
            port=settings_dict["PORT"] or 5432,
            password=settings_dict["PASSWORD"] or None,
        ) as other:
            other.execute("LOCK TABLE django_migrations IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        response = client.get("/studyqueue/healthz")
        assert response.status_code == 200
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        holder.join(10)


# ------------------------------------------------------------------ the consumers' LLM servers


def test_the_llm_check_probes_the_url_a_live_consumer_uses(settings, llm_server, free_port, client):
    """This shell's URL answers; the live consumer's does not: the check says the latter."""
    dead = f"http://127.0.0.1:{free_port}/v1"
    live_consumer(llm_url=dead)
    error = health_error("--llm")
    assert error.startswith(f"llm: the LLM server at {dead} (consumer c1) is unreachable")
    assert llm_server.url not in error
    assert ready(client)[0] == 503

    def answered() -> str | None:  # readyz waits 1 s for the probe: a loaded machine may not
        detail = ready(client)[1]["checks"]["llm"]["detail"]
        return None if "being probed" in detail else detail

    detail = wait_for(answered, timeout=PROBE_DEADLINE_SECONDS + 10, what="the probe's answer")
    assert detail.startswith(f"the LLM server at {dead} (consumer c1)")


def test_each_consumer_url_is_probed_and_named(settings, llm_server, free_port):
    dead = f"http://127.0.0.1:{free_port}/v1"
    live_consumer(worker_id="a", llm_url=llm_server.url)
    live_consumer(worker_id="b", llm_url=llm_server.url + "/")
    live_consumer(worker_id="c", llm_url=dead)
    live_consumer(worker_id="gone", llm_url="http://127.0.0.1:1/v1", stopped_at=timezone.now())
    error = health_error("--llm")
    assert f"the LLM server at {llm_server.url} (consumers a, b) serves 1 model" in error
    assert f"the LLM server at {dead} (consumer c) is unreachable" in error
    assert "gone" not in error and ":1/v1" not in error  # a stopped consumer is not checked


def test_a_consumer_with_url_credentials_is_probed_with_this_process_settings(
    settings, llm_server, make_consumer
):
    """A consumer records its URL redacted; when it is this process's URL, this process's
    credentials and key reach it, and nothing secret is shown."""
    url = llm_server.url.replace("://", "://llmuser:pa55word-xyz@")
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": url, "LLM_API_KEY": "sk-0123456789"}
    make_consumer(worker_id="real").run_cycle()  # records itself as a real consumer does
    text = health_output("--llm")
    shown = llm_server.url.replace("://", "://[redacted]@")
    assert text == f"ok: llm: the LLM server at {shown} (consumer real) serves 1 model\n"


def test_another_url_gets_no_key(hostile, settings, llm_server):
    """A consumer's URL that is not this process's: probed without this process's key (a key
    goes only to the URL it is set for); a server that asks for one is reachable."""
    other = HostileServer("echo_key").start()
    try:
        settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_API_KEY": "sk-0123456789"}
        live_consumer(llm_url=other.url)
        text = health_output("--llm")
        assert f"at {other.url} (consumer c1) answers, asking for a key (HTTP 401)" in text
        assert other.last_authorization == "" and other.requests == 1
    finally:
        other.stop()


@pytest.mark.parametrize("breaker_open", [False, True])
def test_a_url_whose_credentials_are_not_ours_is_judged_by_its_consumer(
    settings, llm_server, breaker_open
):
    since = timezone.now() - timedelta(minutes=3)
    live_consumer(
        llm_url="http://[redacted]@gpu.internal:8080/v1",
        breaker_open=breaker_open,
        breaker_since=since if breaker_open else None,
        breaker_error="llm_unavailable" if breaker_open else "",
    )
    shown = "the LLM server at http://[redacted]@gpu.internal:8080/v1 (consumer c1) is not probed"
    if breaker_open:
        error = health_error("--llm")
        assert error.startswith(f"llm: {shown}") and "reports the LLM unreachable since" in error
    else:
        assert health_output("--llm").startswith(f"ok: llm: {shown}")


def test_a_plain_mlx_lm_server_reads_as_reachable(hostile):
    """mlx_lm.server without a Hugging Face cache answers /v1/models 200 with an empty body."""
    server = hostile("empty_models")
    text = health_output("--llm")
    assert text.startswith(f"ok: llm: the LLM server at {server.url} (this process's LLM_URL")
    assert "serves 0 models (an empty body, as mlx_lm.server sends" in text


def test_readyz_answers_from_its_last_probe_while_a_new_one_runs(hostile, client, monkeypatch):
    """Past its first answer, readyz never waits for the LLM: it answers with the last probe
    (saying how old) and probes again in the background."""
    hostile("drip_models")
    monkeypatch.setattr(health, "FRESH_SECONDS", 0.0)  # every answer is old at once
    wait_for(
        lambda: "no complete answer" in ready(client)[1]["checks"]["llm"]["detail"],
        timeout=PROBE_DEADLINE_SECONDS + 10,
        what="the first probe's answer",
    )
    status, body, seconds = ready(client)
    assert status == 503 and seconds < 0.5, seconds
    assert "no complete answer within 3s (as of " in body["checks"]["llm"]["detail"]


# --------------------------------------------------------------------------- real processes


@pytest.fixture
def gunicorn(child_env, python, free_port):
    """``gunicorn(**settings)``: the project under gunicorn (2 sync workers, as ``serve``
    runs it by default) on 127.0.0.1; its base URL. Stopped at teardown."""
    import subprocess

    from tests.helpers import ROOT

    procs: list[subprocess.Popen] = []

    def start(**settings: str) -> str:
        env = {**child_env, **{f"STUDYQUEUE_{k}": v for k, v in settings.items()}}
        bind = f"127.0.0.1:{free_port}"
        command = [python, "-m", "gunicorn", "project.wsgi:application", "--bind", bind]
        procs.append(
            subprocess.Popen(
                [*command, "--workers", "2"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_for(lambda: _get(f"http://{bind}/studyqueue/healthz")[0] == 200, what="gunicorn")
        return f"http://{bind}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def _get(url: str, timeout: float = 30.0) -> tuple[int, str, float]:
    """A plain GET (no login): status, body, seconds; status 0 when nothing answers."""
    import urllib.error
    import urllib.request

    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    except OSError:
        status, body = 0, ""
    return status, body, time.monotonic() - started


@pytest.mark.slow
def test_gunicorn_readyz_with_a_line_break_in_the_key(gunicorn, hostile):
    key = "sk-live-0123456789abcdef\r\n"
    server = hostile("echo_key")
    base = gunicorn(LLM_URL=server.url, LLM_API_KEY=key)
    status, body, _ = _get(f"{base}/studyqueue/readyz")
    assert status == 503 and "LLM_API_KEY is invalid" in body
    assert "0123456789abcdef" not in body and server.requests == 0


@pytest.mark.slow
def test_gunicorn_healthz_stays_fast_while_readyz_meets_a_dripping_llm(gunicorn, hostile):
    """Two sync workers, readyz hammered by four clients while the LLM server sends a byte
    every 2 s: no readyz holds a worker past its wait, and healthz keeps answering at once."""
    server = hostile("drip_models")
    base = gunicorn(LLM_URL=server.url)
    stop = threading.Event()
    readies: list[tuple[float, int, float]] = []  # started, status, seconds

    def hammer() -> None:
        while not stop.is_set():
            started = time.monotonic()
            status, _, seconds = _get(f"{base}/studyqueue/readyz")
            readies.append((started, status, seconds))

    clients = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        time.sleep(PROBE_DEADLINE_SECONDS + 2)  # every worker has its first probe's answer
        measured_from = time.monotonic()
        timings = []
        for _ in range(40):
            status, _, seconds = _get(f"{base}/studyqueue/healthz")
            assert status == 200
            timings.append(seconds)
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in clients:
            thread.join(30)
    timings.sort()
    steady = [seconds for started, _, seconds in readies if started >= measured_from]
    first = max(seconds for started, _, seconds in readies if started < measured_from)
    print(
        f"healthz_ms median={timings[20] * 1000:.0f} max={timings[-1] * 1000:.0f}; "
        f"readyz first_max_s={first:.2f} then n={len(steady)} max_ms={max(steady) * 1000:.0f}"
    )
    assert {status for _, status, _ in readies} == {503}
    assert first < 2 * health.READY_WAIT_SECONDS + 3  # one wait, maybe queued behind another
    # Medians, not maxima: a probe that waited would take READY_WAIT_SECONDS every time, and
    # one slow answer is only a loaded machine (four test processes on two busy cores gave a
    # healthz median of 0.12 to 0.28 s and a single readyz of 1.6 s).
    waits = sorted(steady)[len(steady) // 2]
    assert waits < health.READY_WAIT_SECONDS, "past the first probe, readyz never waits for the LLM"
    # Not queued behind a readyz: under half of its wait.
    assert timings[20] < health.READY_WAIT_SECONDS / 2, timings


@pytest.mark.slow
def test_the_command_checks_a_running_consumer_s_server_not_the_shell_s(
    consumers, llm_server, settings, free_port
):
    """A real runconsumer on a dead LLM URL; this shell's URL answers: the check fails and
    names that consumer and its URL."""
    dead = f"http://127.0.0.1:{free_port}/v1"
    consumers("--interval", "0.5", "--worker-id", "gpu-1", LLM_URL=dead)
    wait_for(
        lambda: QueueConsumer.objects.filter(worker_id="gpu-1", stopped_at=None).exists(),
        what="the consumer's record",
    )
    error = health_error("--llm")
    assert error.startswith(f"llm: the LLM server at {dead} (consumer gpu-1) is unreachable")
    assert llm_server.url not in error


def test_every_server_of_a_pool_is_probed(settings, llm_server, free_port):
    """This process names two servers and no consumer is live: both are probed, the dead one
    fails the check by name."""
    dead = f"http://127.0.0.1:{free_port}/v1"
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"{llm_server.url},{dead}"}
    error = health_error("--llm")
    assert f"the LLM server at {llm_server.url} (this process's LLM_URL" in error
    assert f"the LLM server at {dead} (this process's LLM_URL; no consumer is live) is " in error


def test_a_pool_consumers_servers_are_each_probed_or_judged_by_its_report(settings, llm_server):
    """A live consumer with two servers: the one this process can reach is probed; the one
    behind credentials that are not this process's is judged by what the consumer reports of
    that server alone (down since a time), not by its breaker (closed: the other is up)."""
    since = timezone.now() - timedelta(minutes=2)
    other = "http://[redacted]@gpu.internal:8080/v1"
    live_consumer(
        llm_url=f"{llm_server.url},{other}",
        endpoints=[
            {"name": llm_server.url, "state": "up"},
            {"name": "http://gpu.internal:8080/v1", "state": "down", "since": since.isoformat()},
        ],
    )
    error = health_error("--llm")
    assert f"the LLM server at {llm_server.url} (consumer c1) serves 1 model" in error
    assert f"at {other} (consumer c1) is not probed" in error
    assert "reports the LLM unreachable since" in error


@pytest.fixture
def prefixed_pool(settings):
    """Three test servers behind one long path prefix, as ``LLM_URL``: more than the 500
    characters ``QueueConsumer.llm_url`` holds."""
    prefix = "/gateway/" + "team-" * 40
    servers = [LLMServer().start() for _ in range(3)]
    for server in servers:
        server.configure(path_prefix=prefix)
    urls = [f"http://127.0.0.1:{server.port}{prefix}/v1" for server in servers]
    settings.STUDYQUEUE = {
        "LLM_URL": ",".join(urls),
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    assert len(",".join(urls)) > 500
    yield urls
    for server in servers:
        server.stop()


def test_a_pool_whose_urls_outgrow_the_record_is_probed_whole(prefixed_pool, make_consumer, client):
    """The consumer's record cuts the joined URLs; health probes each server's whole URL (its
    report of each server), so readyz says ready."""
    make_consumer(worker_id="pool").run_cycle()
    record = QueueConsumer.objects.get(worker_id="pool")
    assert len(record.llm_url) == 500 and record.llm_url != ",".join(prefixed_pool)
    text = health_output("--llm")
    for url in prefixed_pool:
        assert f"the LLM server at {url} (consumer pool) serves 1 model" in text
    wait_for(lambda: ready(client)[0] == 200, timeout=PROBE_DEADLINE_SECONDS + 10, what="ready")


def test_a_cut_url_of_a_record_without_server_reports_is_never_probed(prefixed_pool):
    """A record written before its first report has only the cut ``llm_url``: its last piece
    is probed as the whole URL of this process it begins, never as cut."""
    live_consumer(llm_url=",".join(prefixed_pool)[:500])
    text = health_output("--llm")
    for url in prefixed_pool:
        assert f"the LLM server at {url} (consumer c1) serves 1 model" in text
    tail = "http://127.0.0.1:1/" + "z" * 600  # cut, and the beginning of no URL of ours
    live_consumer(worker_id="c2", llm_url=f"{prefixed_pool[0]},{tail}"[:500])
    text = health_output("--llm")
    assert text.count("serves 1 model") == 3 and ":1/z" not in text
    assert f"{prefixed_pool[0]} (consumers c1, c2) serves 1 model" in text
