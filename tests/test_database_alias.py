"""One rule for the database alias: every queue query, reads included, runs on
``models.database()`` (the router's write alias for jobs), never on ``db_for_read``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from studyqueue.models import JobKind, JobStatus, StudyQuestionJob, database
from studyqueue.queue import transitions as queue
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db(transaction=True)


class ReadsElsewhere:
    """A router whose reads go to a replica this project does not have: a query that asks
    ``db_for_read`` (or the default manager) fails with ``ConnectionDoesNotExist``."""

    def db_for_read(self, model, **hints):
        return "replica"

    def db_for_write(self, model, **hints):
        return "default"


@pytest.fixture
def reads_elsewhere(settings):
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadsElsewhere"]


def test_every_queue_function_runs_on_the_write_alias(reads_elsewhere):
    assert database() == "default"
    question = StudyQuestionFactory.create()
    job = queue.enqueue(question).job
    assert queue.enqueue(question).created is False  # the existing active job, read back
    other = StudyQuestionFactory.create()
    assert queue.enqueue_many([question.pk, other.pk]) == 1
    other_job = StudyQuestionJob.objects.using("default").get(study_question=other)
    assert queue.next_due_in() == 0.0
    (claimed,) = queue.claim(worker_id="w", limit=1)
    assert claimed.pk == job.pk and queue.heartbeat(claimed)
    assert queue.complete(claimed)
    assert queue.skip([other_job.pk]).skipped == [other_job.pk]
    assert queue.retry([other_job.pk]).retried == [other_job.pk]
    assert queue.pause(JobKind.EXPLANATION)[1] and queue.paused_kinds() == [JobKind.EXPLANATION]
    assert queue.resume(JobKind.EXPLANATION)
    stale = StudyQuestionJobFactory.create(
        status=JobStatus.PROCESSING, attempts=1, heartbeat_at=timezone.now() - timedelta(days=1)
    )
    assert queue.reset_stale(dry_run=True).reset == 1
    assert queue.reset_stale().reset_ids == [stale.pk]
    StudyQuestionJob.objects.using("default").filter(pk=job.pk).update(
        completed_at=timezone.now() - timedelta(days=30)
    )
    assert queue.prune_finished(older_than=timedelta(days=7)) == 1


def test_a_consume_cycle_runs_on_the_write_alias(reads_elsewhere, llm_server, make_consumer):
    job = queue.enqueue(StudyQuestionFactory.create()).job
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    job.refresh_from_db(using="default")
    assert job.status == JobStatus.COMPLETED
