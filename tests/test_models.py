"""Database-enforced invariants of the models."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from studyqueue.models import JobStatus, StudyQuestionJob
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("field,value", [("status", "exploded"), ("kind", "poem")])
def test_check_constraints_reject_unknown_values(field, value):
    job = StudyQuestionJobFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        StudyQuestionJob.objects.filter(pk=job.pk).update(**{field: value})


@pytest.mark.parametrize("active", ["pending", "processing"])
def test_at_most_one_active_job_per_question_and_kind(active):
    question = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=question, status=active)
    with pytest.raises(IntegrityError), transaction.atomic():
        StudyQuestionJobFactory(study_question=question, status=JobStatus.PENDING)


def test_finished_jobs_do_not_count_as_active():
    question = StudyQuestionFactory()
    for status in ("completed", "failed", "skipped", "completed"):
        StudyQuestionJobFactory(study_question=question, status=status)
    StudyQuestionJobFactory(study_question=question, status="pending")
    assert StudyQuestionJob.objects.filter(study_question=question).count() == 5


def test_deleting_a_question_keeps_its_jobs():
    job = StudyQuestionJobFactory(status="completed")
    job.study_question.delete()
    job.refresh_from_db()
    assert job.study_question_id is None


def test_str_and_queryset_filters():
    question = StudyQuestionFactory(text="x" * 100)
    assert str(question).endswith("...") and len(str(question)) < 80
    job = StudyQuestionJobFactory(study_question=question)
    assert str(job) == f"job {job.pk} (Explanation, Pending)"  # labels: the admin shows it
    assert list(StudyQuestionJob.objects.active()) == [job]
    assert not StudyQuestionJob.objects.finished().exists()
