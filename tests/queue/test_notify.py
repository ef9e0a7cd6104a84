"""LISTEN/NOTIFY (``studyqueue.queue.notify``): the messages, their parsing, and a real LISTEN
connection receiving what the queue sends."""

from __future__ import annotations

import contextlib
import queue as stdlib_queue
import socket
import threading

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.urls import reverse

from studyqueue.models import JobKind, JobStatus, StudyQuestionJob
from studyqueue.monitoring import health
from studyqueue.queue import notify, operations, pauses
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.operations import retry_ended
from studyqueue.queue.pauses import resume
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers import database_url, wait_for
from tests.helpers.processes import bulk_jobs, log_text

WAKE = notify.wake()

VALID = [
    (notify.JOBS_CHANNEL, "", WAKE),
    (notify.CONTROL_CHANNEL, "cancel:7", notify.cancel(7)),
    (notify.CONTROL_CHANNEL, f"cancel:{2**63 - 1}", notify.cancel(2**63 - 1)),
    (notify.CONTROL_CHANNEL, "pause:", notify.pause("")),
    (notify.CONTROL_CHANNEL, "pause:explanation", notify.pause(JobKind.EXPLANATION)),
]

GARBAGE = [
    (notify.JOBS_CHANNEL, "x"),
    (notify.JOBS_CHANNEL, "cancel:7"),  # a control message on the wake-up channel
    ("other_channel", ""),
    (notify.CONTROL_CHANNEL, ""),
    (notify.CONTROL_CHANNEL, "cancel"),
    (notify.CONTROL_CHANNEL, "cancel:"),
    (notify.CONTROL_CHANNEL, "cancel:abc"),
    (notify.CONTROL_CHANNEL, "cancel:-1"),
    (notify.CONTROL_CHANNEL, "cancel:+7"),
    (notify.CONTROL_CHANNEL, "cancel:0"),
    (notify.CONTROL_CHANNEL, "cancel: 7"),
    (notify.CONTROL_CHANNEL, "cancel:7 "),
    (notify.CONTROL_CHANNEL, "cancel:7:8"),
    (notify.CONTROL_CHANNEL, "cancel:1e3"),
    (notify.CONTROL_CHANNEL, "cancel:\u0663"),  # ARABIC-INDIC DIGIT THREE: isdecimal() is True
    (notify.CONTROL_CHANNEL, "cancel:\uff17"),  # FULLWIDTH DIGIT SEVEN
    (notify.CONTROL_CHANNEL, f"cancel:{2**63}"),  # no bigint id
    (notify.CONTROL_CHANNEL, "CANCEL:7"),
    (notify.CONTROL_CHANNEL, "pause"),
    (notify.CONTROL_CHANNEL, "pause:nope"),
    (notify.CONTROL_CHANNEL, "pause:Explanation"),
    (notify.CONTROL_CHANNEL, "resume:"),
    (notify.CONTROL_CHANNEL, "wake"),
]


@pytest.mark.parametrize("channel,payload,message", VALID)
def test_parse_reads_what_send_sends(channel, payload, message):
    assert notify.parse(channel, payload) == message
    assert (message.channel, message.payload) == (channel, payload)


@pytest.mark.parametrize("channel,payload", GARBAGE)
def test_parse_refuses_garbage(channel, payload):
    with pytest.raises(ValueError, match="not a"):
        notify.parse(channel, payload)


@pytest.mark.parametrize("job_id", [0, -1, 2**63])
def test_a_cancel_needs_a_job_id(job_id):
    with pytest.raises(ValueError, match="not a job id"):
        notify.cancel(job_id)


def test_a_pause_needs_a_known_kind():
    with pytest.raises(ValueError, match="not a job kind"):
        notify.pause("nope")


@pytest.mark.django_db
def test_on_sqlite_nothing_is_sent_and_nobody_listens():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite behaviour")
    notify.send(WAKE, using="default")  # no error: SQLite consumers poll
    assert notify.start_listener("default", print, stopping=lambda: True, wait=print) is None


class Listening:
    """A real LISTEN thread (``notify.start_listener``) on the test database that collects
    the messages it receives."""

    def __init__(self) -> None:
        self.received: stdlib_queue.Queue[notify.Message] = stdlib_queue.Queue()
        self.stop = threading.Event()
        thread = notify.start_listener(
            "default", self.received.put, stopping=self.stop.is_set, wait=self.stop.wait
        )
        assert thread is not None
        self.thread = thread

    def ready(self) -> None:
        """Wait until the LISTEN is in place: wake-ups sent until one arrives, then drained."""
        for _ in range(100):
            notify.send(WAKE, using="default")
            try:
                self.received.get(timeout=0.2)
                break
            except stdlib_queue.Empty:
                continue
        else:
            raise AssertionError("the listener never received a wake-up")
        self.drain(expect_more=False)

    def drain(self, *, expect_more: bool = True) -> list[notify.Message]:
        """Everything received until nothing more comes for a while."""
        got = []
        timeout = 10.0 if expect_more else 0.5
        while True:
            try:
                got.append(self.received.get(timeout=timeout))
            except stdlib_queue.Empty:
                return got
            timeout = 0.5

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def listening():
    listener = Listening()
    listener.ready()
    yield listener
    listener.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_real_listen_connection_receives_what_send_sends_and_drops_garbage(listening, caplog):
    sent = [m for _, _, m in VALID]
    with caplog.at_level("WARNING", logger="studyqueue.notify"):
        for message in sent:
            notify.send(message, using="default")
            with connection.cursor() as cursor:  # another program's notice: refused, logged
                cursor.execute("SELECT pg_notify(%s, %s)", [notify.CONTROL_CHANNEL, "cancel:x"])
        assert listening.drain() == sent
    assert caplog.text.count("study_notice_refused") == len(sent)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_notice_leaves_with_its_transaction(listening):
    with pytest.raises(RuntimeError), transaction.atomic():
        notify.send(notify.cancel(1), using="default")
        raise RuntimeError("rolled back")
    with transaction.atomic():
        notify.send(notify.cancel(2), using="default")
    assert listening.drain() == [notify.cancel(2)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_queue_tells_the_consumers(listening):
    """Enqueue and retry wake consumers, a skip of a running job cancels its call, a pause
    names its kind, a resume wakes consumers."""
    question = StudyQuestionFactory()
    job = enqueue(question).job
    assert listening.drain() == [WAKE]
    running = StudyQuestionJobFactory(status=JobStatus.PROCESSING, attempts=1)
    operations.skip([running.pk])
    assert listening.drain() == [notify.cancel(running.pk)]
    operations.skip([job.pk])  # pending: nobody runs it, nothing to cancel
    retry_ended([job.pk])
    assert listening.drain() == [WAKE]
    pauses.pause(JobKind.EXPLANATION)
    pauses.pause("")
    assert listening.drain() == [notify.pause(JobKind.EXPLANATION), notify.pause("")]
    resume(JobKind.EXPLANATION)
    assert listening.drain() == [WAKE]


class Hangup:
    """A "PostgreSQL server" on 127.0.0.1 that accepts each connection and closes it at once
    (a direct URL whose server is not there): it counts the tries."""

    def __init__(self) -> None:
        self.tries = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # closed by the test
            while True:
                conn, _ = self.server.accept()
                self.tries += 1
                conn.close()

    @property
    def url(self) -> str:
        port = self.server.getsockname()[1]
        return f"postgres://u:pw@127.0.0.1:{port}/sq?sslmode=disable"  # one connection a try


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_unreachable_direct_url_is_logged_once_and_jobs_still_run(consumers, child_env, client):
    """Behind a transaction pooler (``DATABASE_POOLING=transaction``) with a
    ``DIRECT_DATABASE_URL`` that never answers: one log line however often LISTEN is tried
    again, new jobs run long before the 300 s interval (the listener looks for them each
    second) with one attempt each, and readyz's database check says so."""
    direct = Hangup()
    child_env["DATABASE_POOLING"] = "transaction"
    proc = consumers(INTERVAL_SECONDS=300, DIRECT_DATABASE_URL=direct.url)
    for line in ("study_listen_failed", "study_consumer_cycle"):  # its first cycle ran
        wait_for(lambda line=line: line in log_text(proc), timeout=30, what=line)
    ids = bulk_jobs(2)
    jobs = StudyQuestionJob.objects.filter(study_question_id__in=ids)
    wait_for(
        lambda: set(jobs.values_list("status", "attempts")) == {("completed", 1)},
        timeout=20,
        what="the jobs to run, each once",
    )
    wait_for(lambda: direct.tries >= 3, timeout=30, what="LISTEN tried again twice")
    assert log_text(proc).count("study_listen_failed") == 1
    assert "study_listen_ready" not in log_text(proc)

    entry = connection.settings_dict
    saved = entry.get("DISABLE_SERVER_SIDE_CURSORS")
    entry["DISABLE_SERVER_SIDE_CURSORS"] = True  # what DATABASE_POOLING=transaction sets
    try:
        with override_settings(STUDYQUEUE={"DIRECT_DATABASE_URL": direct.url}):
            db = client.get(reverse("studyqueue:readyz")).json()["checks"]["db"]
        assert (
            db["ok"] and "DIRECT_DATABASE_URL does not answer (OperationalError)" in (db["detail"])
        )
        reachable = database_url("postgresql", entry)
        with override_settings(STUDYQUEUE={"DIRECT_DATABASE_URL": reachable}):
            assert health.check_db().detail == "the database answers and is migrated"
    finally:
        entry["DISABLE_SERVER_SIDE_CURSORS"] = saved
        direct.server.close()
