"""The SQLite consumer's wake-up: a real poll thread on the test database."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from studyqueue.queue import poll, transitions
from tests.factories import StudyQuestionJobFactory
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the thread has its own connection


class Polling:
    """``poll.start_poller`` on the test database, counting its wake-ups."""

    def __init__(self, *, idle: bool = True) -> None:
        self.woken = 0
        self.checks = 0
        self.is_idle = idle
        self.stop = threading.Event()
        self.thread = poll.start_poller("default", self.on_ready, idle=self.idle, wait=self.wait)

    def on_ready(self) -> None:
        self.woken += 1

    def idle(self) -> bool:
        return self.is_idle

    def wait(self, seconds: float) -> bool:
        self.checks += 1
        return self.stop.wait(seconds)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
            assert not self.thread.is_alive()


@pytest.fixture
def polling():
    made: list[Polling] = []

    def start(**kwargs: bool) -> Polling:
        made.append(Polling(**kwargs))
        return made[-1]

    yield start
    for each in made:
        each.close()


def test_on_postgresql_nobody_polls(polling):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL behaviour")
    assert polling().thread is None  # LISTEN/NOTIFY wakes its consumers


@pytest.fixture
def sqlite():
    if connection.vendor == "postgresql":
        pytest.skip("SQLite behaviour (PostgreSQL has LISTEN/NOTIFY)")


def test_a_ready_job_wakes_an_idle_consumer_within_a_second(sqlite, polling):
    watcher = polling()
    assert watcher.thread is not None and watcher.thread.name == "studyqueue-poll"
    wait_for(lambda: watcher.checks >= 2, what="a check with nothing ready")
    assert watcher.woken == 0
    job = StudyQuestionJobFactory()
    enqueued = time.monotonic()
    wait_for(lambda: watcher.woken, timeout=5, what="the wake-up")
    print(f"enqueue_to_wake_s={time.monotonic() - enqueued:.3f} job={job.pk}")


def test_no_check_while_a_cycle_runs_and_no_wake_for_a_job_not_due(sqlite, polling):
    StudyQuestionJobFactory()
    busy = polling(idle=False)
    later = StudyQuestionJobFactory(run_after=timezone.now() + timedelta(hours=1))
    wait_for(lambda: busy.checks >= 3, what="several seconds of a running cycle")
    assert busy.woken == 0
    assert transitions.claim(worker_id="t", limit=1)  # nothing ready now
    idle = polling()
    wait_for(lambda: idle.checks >= 3, what="several idle checks")
    assert idle.woken == 0, f"job {later.pk} is due in an hour"
