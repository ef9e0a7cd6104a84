"""The claim rule, assembled from the kinds' specs: a registered wait decides the claim."""

from __future__ import annotations

from dataclasses import replace

import pytest

from studyqueue.models import KIND_SPECS, JobKind, delivery_kinds, kind_waits
from studyqueue.queue import sql, transitions
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


def test_every_kind_with_a_handler_is_registered_when_django_starts():
    assert set(KIND_SPECS) == set(JobKind.values)
    assert delivery_kinds() == {JobKind.SET_NOTICE, JobKind.SESSION_NOTICE}
    assert {kind for kind, _ in kind_waits()} == {JobKind.EXPLANATION, JobKind.SESSION_SUMMARY}


def test_a_registered_wait_holds_its_kinds_jobs_in_every_statement_that_reads_the_rule(
    monkeypatch,
):
    audit = StudyQuestionJobFactory(kind=JobKind.KEY_AUDIT)
    spec = KIND_SPECS[JobKind.KEY_AUDIT]
    assert not spec.wait
    # A kind waits while its condition holds: here, while any explanation job exists.
    wait = "EXISTS (SELECT 1 FROM studyqueue_studyquestionjob AS other"
    wait += " WHERE other.kind = 'explanation')"
    monkeypatch.setitem(KIND_SPECS, JobKind.KEY_AUDIT, replace(spec, wait=wait))
    explanation = StudyQuestionJobFactory(run_after="2999-01-01T00:00Z")  # not due for long
    assert wait in sql.claim("sqlite", 1) and wait in sql.claim("postgresql", 1)
    assert transitions.ready() == []
    assert not transitions.has_ready()
    assert transitions.next_due_in() > 3600  # the explanation, far ahead; not the audit
    assert transitions.claim(worker_id="w", limit=10) == []
    explanation.delete()
    assert [job.pk for job in transitions.ready()] == [audit.pk]
    assert transitions.next_due_in() == 0.0
    assert [job.pk for job in transitions.claim(worker_id="w", limit=10)] == [audit.pk]


def test_a_kinds_priority_is_its_jobs_priority_when_queued(monkeypatch):
    question = StudyQuestionFactory()
    spec = KIND_SPECS[JobKind.KEY_AUDIT]
    monkeypatch.setitem(KIND_SPECS, JobKind.KEY_AUDIT, replace(spec, priority=7))
    assert enqueue(question, JobKind.KEY_AUDIT).job.priority == 7
    assert enqueue(question).job.priority == 0
