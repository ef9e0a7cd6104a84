"""Scheduler wiring: per-consumer job store scoping and the weekly prune."""

from __future__ import annotations

from datetime import timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from django.utils import timezone
from django_apscheduler.models import DjangoJob, DjangoJobExecution

from studyqueue.consumer import scheduler
from studyqueue.models import StudyQuestionJob
from tests.factories import StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled(make_consumer):
    return scheduler.ScheduledConsumer(make_consumer(worker_id="me", interval=30))


def job_row(job_id: str, next_run: timezone.datetime | None) -> DjangoJob:
    return DjangoJob.objects.create(id=job_id, next_run_time=next_run, job_state=b"")


@pytest.mark.django_db(transaction=True)
def test_a_consumer_store_sees_only_its_own_rows():
    """Two consumers share django-apscheduler's tables; neither sees the other's jobs."""
    past = timezone.now() - timedelta(seconds=5)
    schedulers = []
    for name in ("a", "b"):
        sched = BackgroundScheduler(timezone="UTC")
        sched.add_jobstore(scheduler.ConsumerJobStore(f"studyqueue@{name}/"), "default")
        sched.start(paused=True)
        sched.add_job(
            scheduler.prune_job,
            "interval",
            seconds=60,
            kwargs={"worker_id": name},
            id=f"studyqueue@{name}/prune",
            next_run_time=past,
        )
        schedulers.append(sched)
    try:
        assert [j.id for j in schedulers[0].get_jobs()] == ["studyqueue@a/prune"]
        store_a = scheduler.ConsumerJobStore("studyqueue@a/")
        store_a.start(schedulers[0], "a")
        assert [j.id for j in store_a.get_due_jobs(timezone.now())] == ["studyqueue@a/prune"]
        assert [j.id for j in store_a.get_all_jobs()] == ["studyqueue@a/prune"]
        assert store_a.get_next_run_time() == past.replace(microsecond=past.microsecond)
        store_a.remove_all_jobs()
        assert set(DjangoJob.objects.values_list("id", flat=True)) == {"studyqueue@b/prune"}
    finally:
        for sched in schedulers:
            sched.shutdown(wait=False)


@pytest.mark.django_db(transaction=True)  # prune_job closes connections, as in production
def test_prune_drops_old_executions_dead_consumers_and_optionally_old_jobs(settings):
    now = timezone.now()
    mine = job_row("studyqueue@me/consume", now - timedelta(days=3))
    dead = job_row("studyqueue@dead/consume", now - timedelta(days=2))
    alive = job_row("studyqueue@alive/consume", now + timedelta(seconds=30))
    foreign = job_row("someone-else", now - timedelta(days=9))
    for age_days in (1, 10):
        DjangoJobExecution.objects.create(
            job=alive, status=DjangoJobExecution.SUCCESS, run_time=now - timedelta(days=age_days)
        )
    old_done = StudyQuestionJobFactory(status="completed", completed_at=now - timedelta(days=40))
    recent_done = StudyQuestionJobFactory(status="failed", completed_at=now - timedelta(days=1))
    pending = StudyQuestionJobFactory()

    scheduler.prune_job(worker_id="me")  # PRUNE_FINISHED_AFTER_DAYS defaults to 0: keep every job
    assert set(DjangoJob.objects.values_list("id", flat=True)) == {mine.id, alive.id, foreign.id}
    assert dead.id not in DjangoJob.objects.values_list("id", flat=True)
    assert DjangoJobExecution.objects.count() == 1  # the 10-day-old one is gone (7-day history)
    assert StudyQuestionJob.objects.count() == 3

    settings.STUDYQUEUE = {"PRUNE_FINISHED_AFTER_DAYS": 30}
    scheduler.prune_job(worker_id="me")
    assert set(StudyQuestionJob.objects.values_list("pk", flat=True)) == {
        recent_done.pk,
        pending.pk,
    }
    assert old_done.pk not in StudyQuestionJob.objects.values_list("pk", flat=True)


def test_after_cycle_reschedules_sooner_when_work_is_due(scheduled):
    seen: list[float] = []
    scheduled._run_at = seen.append  # record instead of touching a scheduler

    class Event:
        job_id = scheduled.consume_job_id
        exception = None

        def __init__(self, retval):
            self.retval = retval

    from studyqueue.consumer.consumer import CycleResult

    scheduled.after_cycle(Event(CycleResult(next_due_in=None)))
    scheduled.after_cycle(Event(CycleResult(next_due_in=0.0)))
    scheduled.after_cycle(Event(CycleResult(next_due_in=5.0)))
    failed = Event(None)
    failed.exception = RuntimeError("db gone")
    scheduled.after_cycle(failed)
    scheduled._wake_pending = True
    scheduled.after_cycle(Event(CycleResult(next_due_in=None)))
    assert seen == [30, 0.0, 5.0, scheduler.ERROR_RETRY_SECONDS, 0.0]


def test_while_the_breaker_pauses_the_next_cycle_waits_for_its_end(scheduled, settings, caplog):
    """Jobs are ready (next_due_in=0) but nothing can be claimed: the next cycle runs when
    the pause ends (at most an interval away, so that the consumer keeps reporting), a
    wake-up does not start one sooner, and the log says why once per pause."""
    from studyqueue.consumer.consumer import CycleResult
    from studyqueue.models import ErrorCode
    from studyqueue.services.llm import LLMError

    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 8, "BREAKER_MAX_SECONDS": 45}
    seen: list[float] = []
    scheduled._run_at = seen.append  # record instead of touching a scheduler

    class Event:
        job_id = scheduled.consume_job_id
        exception = None
        retval = CycleResult(next_due_in=0.0)

    # A server that drops its connections (a refused one pauses at most BREAKER_BASE_SECONDS
    # here: it never grows past the interval).
    down = LLMError(ErrorCode.LLM_UNAVAILABLE, "connection dropped before a reply")
    scheduled.consumer.pool.members[0].breaker.trip(down)  # an 8 s pause
    with caplog.at_level("INFO", logger="studyqueue.consumer"):
        scheduled.after_cycle(Event())
        scheduled.wake()
        scheduled.after_cycle(Event())
    assert len(seen) == 2 and all(7 < delay <= 8 for delay in seen)
    waits = [r.getMessage() for r in caplog.records if "study_consumer_waiting" in r.message]
    assert len(waits) == 1 and "reason=llm_paused wait_s=" in waits[0]
    assert "error_code=llm_unavailable" in waits[0]

    for _ in range(3):
        scheduled.consumer.pool.members[0].breaker.trip(
            down
        )  # 16, 32, then 45 s: longer than the interval
    scheduled.after_cycle(Event())
    assert seen[-1] == 30

    scheduled.consumer.pool.members[0].breaker.success()
    scheduled.after_cycle(Event())
    scheduled.wake()
    assert seen[-2:] == [0.0, 0.0]
