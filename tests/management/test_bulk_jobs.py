"""retryjobs and skipjobs: the admin's retry and skip for selections past its limit."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from studyqueue.models import StudyQuestionJob
from tests.factories import StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


def test_retryjobs_retries_the_picked_failed_jobs_in_batches(monkeypatch):
    from studyqueue.management.commands import _jobsets

    monkeypatch.setattr(_jobsets, "BATCH", 2)  # several batches from five jobs
    timeouts = [
        StudyQuestionJobFactory(status="failed", error_code="llm_timeout") for _ in range(5)
    ]
    rejected = StudyQuestionJobFactory(status="failed", error_code="llm_rejected")
    skipped = StudyQuestionJobFactory(status="skipped")
    assert run("retryjobs", "--error-code", "llm_timeout", "--dry-run") == (
        "Would retry up to 5 job(s)."
    )
    assert StudyQuestionJob.objects.filter(status="failed").count() == 6
    assert run("retryjobs", "--error-code", "llm_timeout") == (
        "Retried 5 job(s); 0 refused: their question already has an active job of the same kind."
    )
    assert {j.status for j in StudyQuestionJob.objects.filter(pk__in=[j.pk for j in timeouts])} == {
        "pending"
    }
    assert StudyQuestionJob.objects.get(pk=rejected.pk).status == "failed"
    assert StudyQuestionJob.objects.get(pk=skipped.pk).status == "skipped"
    assert run("retryjobs", "--status", "skipped", "--status", "failed").startswith(
        "Retried 2 job(s)"
    )


def test_retryjobs_names_each_refused_job_and_the_active_one_in_its_way():
    active = StudyQuestionJobFactory(status="pending")
    failed = StudyQuestionJobFactory(status="failed", study_question=active.study_question)
    assert run("retryjobs") == (
        "Retried 0 job(s); 1 refused: their question already has an active job of the same "
        f"kind (refused → active: {failed.pk} → {active.pk})."
    )


def test_skipjobs_skips_pending_jobs_of_a_kind():
    pending = [StudyQuestionJobFactory() for _ in range(3)]
    summary = StudyQuestionJobFactory(kind="session_summary")
    assert run("skipjobs", "--kind", "explanation") == "Skipped 3 job(s)."
    assert {j.status for j in StudyQuestionJob.objects.filter(pk__in=[j.pk for j in pending])} == {
        "skipped"
    }
    assert StudyQuestionJob.objects.get(pk=summary.pk).status == "pending"


def test_bad_filters_are_one_line_errors():
    with pytest.raises(CommandError, match="invalid choice"):
        run("skipjobs", "--status", "completed")
    with pytest.raises(CommandError, match="invalid choice"):
        run("retryjobs", "--error-code", "nope")
