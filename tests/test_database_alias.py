"""One rule for the database alias: every studyqueue query, reads included, runs on
``models.database()`` (the router's write alias for jobs), never on ``db_for_read``: the
queue's functions, a consume cycle, the models' managers (related ones and prefetches
included) and the admin's pages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection, connections
from django.urls import reverse
from django.utils import timezone

from studyqueue.explanations import revisions
from studyqueue.models import (
    ExplanationRevision,
    GateLimit,
    JobAttempt,
    JobKind,
    JobStatus,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
    database,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue, enqueue_many
from studyqueue.queue.operations import prune_finished, retry_ended, skip
from studyqueue.queue.pauses import pause, paused_kinds, resume
from tests.factories import (
    ExplanationRevisionFactory,
    QueueConsumerFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)


class ReadsElsewhere:
    """A router that sends the reads of studyqueue's models to a replica (other apps' reads,
    the admin's users and sessions, stay where they are); writes go to ``default``."""

    def db_for_read(self, model, **hints):
        return "replica" if model._meta.app_label == "studyqueue" else None

    def db_for_write(self, model, **hints):
        return "default"


@pytest.fixture
def reads_elsewhere(settings, tmp_path: Path) -> Iterator[None]:
    """``ReadsElsewhere``, with a "replica" alias that no query can use (the test is not
    allowed it, and its database does not exist). The alias exists because Django's reverse
    related managers look up the read alias's connection (for a feature flag, no query)
    before they query."""
    absent = (
        "studyqueue_absent_replica"
        if connection.vendor == "postgresql"
        else str(tmp_path / "absent" / "replica.sqlite3")
    )
    connections.settings["replica"] = {**connections.settings["default"], "NAME": absent}
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadsElsewhere"]
    yield
    connections["replica"].close()
    del connections["replica"]
    del connections.settings["replica"]


def test_a_query_sent_to_the_replica_fails(reads_elsewhere):
    """The fixture's premise: a plain ``db_for_read`` query would not go unnoticed."""
    with pytest.raises(Exception, match=r"(?i)database"):
        StudyQuestion.objects.using("replica").exists()


def test_every_queue_function_runs_on_the_write_alias(reads_elsewhere):
    assert database() == "default"
    question = StudyQuestionFactory.create()
    job = enqueue(question).job
    assert enqueue(question).created is False  # the existing active job, read back
    other = StudyQuestionFactory.create()
    assert enqueue_many([question.pk, other.pk]) == 1
    other_job = StudyQuestionJob.objects.using("default").get(study_question=other)
    assert transitions.next_due_in() == 0.0
    (claimed,) = transitions.claim(worker_id="w", limit=1)
    assert claimed.pk == job.pk and transitions.heartbeat(claimed)
    assert transitions.complete(claimed)
    assert skip([other_job.pk]).skipped == [other_job.pk]
    assert retry_ended([other_job.pk]).retried == [other_job.pk]
    assert pause(JobKind.EXPLANATION)[1] and paused_kinds() == [JobKind.EXPLANATION]
    assert resume(JobKind.EXPLANATION)
    stale = StudyQuestionJobFactory.create(
        status=JobStatus.PROCESSING, attempts=1, heartbeat_at=timezone.now() - timedelta(days=1)
    )
    assert transitions.reset_stale(dry_run=True).reset == 1
    assert transitions.reset_stale().reset_ids == [stale.pk]
    StudyQuestionJob.objects.using("default").filter(pk=job.pk).update(
        completed_at=timezone.now() - timedelta(days=30)
    )
    assert prune_finished(older_than=timedelta(days=7)) == 1


def test_a_consume_cycle_runs_on_the_write_alias(reads_elsewhere, llm_server, make_consumer):
    job = enqueue(StudyQuestionFactory.create()).job
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    job.refresh_from_db(using="default")
    assert job.status == JobStatus.COMPLETED


def every_model() -> list[type]:
    """studyqueue's models, proxies (the admin's pages) included."""
    return list(apps.get_app_config("studyqueue").get_models())


def test_every_default_manager_reads_on_the_write_alias(reads_elsewhere):
    assert database() == "default"
    StudyQuestionJobFactory.create()
    assert QueuePause in every_model() and len(every_model()) >= 9
    for model in every_model():
        assert model._default_manager.all().db == "default", model
        assert model.objects.all().db == "default", model
        model.objects.exists()  # a query: on the replica it would fail
    # A database named in the query still wins.
    assert StudyQuestionJob.objects.using("replica").db == "replica"
    assert StudyQuestionJob.objects.db_manager("replica").all().db == "replica"


def test_related_managers_and_prefetches_keep_the_write_alias(reads_elsewhere):
    question = StudyQuestionFactory.create()
    revision = ExplanationRevisionFactory.create(question=question)
    revisions.make_current(revision)
    job = enqueue(question).job
    (claimed,) = transitions.claim(worker_id="w", limit=1)
    assert transitions.complete(claimed, revision=revision)
    question = StudyQuestion.objects.get(pk=question.pk)
    assert question.revisions.all().db == question.jobs.all().db == "default"
    assert [r.question_id for r in question.revisions.all()] == [question.pk]
    assert [j.pk for j in question.jobs.active()] == []  # the custom QuerySet's methods too
    assert question.jobs.get().pk == job.pk
    assert question.jobs.get().attempt_log.get().number == 1
    (prefetched,) = StudyQuestion.objects.prefetch_related("revisions", "jobs__attempt_log")
    assert len(prefetched.revisions.all()) == 1
    assert prefetched.jobs.all()[0].attempt_log.all()[0].number == 1
    (joined,) = StudyQuestionJob.objects.select_related("study_question", "revision")
    assert joined.study_question == question and joined.revision is not None


def test_the_admin_reads_on_the_write_alias(reads_elsewhere, admin_client):
    """Every studyqueue changelist (the dashboard and review pages included) and a
    question's page, over a row of every kind: the admin reads through the default
    managers."""
    question = StudyQuestionFactory.create(choices=["3", "4"], answer="4")
    revision = ExplanationRevisionFactory.create(question=question, flags=["answer_mismatch"])
    revisions.make_current(revision)
    ExplanationRevisionFactory.create(question=question, candidate=True)
    job = enqueue(question).job
    (claimed,) = transitions.claim(worker_id="w", limit=1)
    transitions.complete(claimed, revision=revision)
    StudyQuestionJobFactory.create(status=JobStatus.FAILED, error_code="llm_timeout")
    QueueConsumerFactory.create()
    GateLimit.objects.create(endpoint="http://127.0.0.1:9/v1", limit=2)
    pause(JobKind.EXPLANATION, by="op")
    assert JobAttempt.objects.filter(job=job).exists()
    pages = [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in every_model()
        if model in admin.site._registry
    ]
    assert len(pages) >= 7
    pages.append(reverse("admin:studyqueue_studyquestion_change", args=[question.pk]))
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
    assert ExplanationRevision.objects.count() == 2


def test_deferred_fields_and_forward_relations_load_on_the_write_alias(reads_elsewhere):
    question = StudyQuestionFactory.create()
    job = StudyQuestionJobFactory.create(study_question=question, error_message="boom")
    assert StudyQuestionJob.objects.defer("error_message").get(pk=job.pk).error_message == "boom"
    assert StudyQuestionJob.objects.get(pk=job.pk).study_question == question
