"""Actions on "select all" over tens of thousands of rows: bounded, logged, or refused
with the command to use instead."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from studyqueue.models import StudyQuestion, StudyQuestionJob
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers.admin import (
    JOBS_URL,
    QUESTIONS_URL,
    SCALE,
    act_on_all,
    many_jobs,
)

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------- bulk actions at scale


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_skip_then_retry_of_35001_jobs_finish_and_are_logged_once(admin_client, admin_user):
    ids = many_jobs(SCALE, "pending")
    assert act_on_all(admin_client, JOBS_URL, "skip_jobs", status="pending") == [
        f"Skipped {SCALE} job(s)."
    ]
    assert StudyQuestionJob.objects.filter(status="skipped").count() == SCALE
    assert act_on_all(admin_client, JOBS_URL, "retry_jobs", status="skipped") == [
        f"Retried {SCALE} job(s)."
    ]
    assert StudyQuestionJob.objects.filter(status="pending", attempts=0).count() == SCALE
    # One entry per action, naming every job (as id ranges), not 35,001 entries.
    skip_entry, retry_entry = LogEntry.objects.order_by("pk")
    expected = f"{ids[0]}-{ids[-1]}"
    assert skip_entry.user == retry_entry.user == admin_user
    assert skip_entry.object_repr == f"{SCALE} study question jobs"
    assert skip_entry.get_change_message() == f"Skipped by an operator: {SCALE} (ids {expected})"
    assert retry_entry.get_change_message() == (
        f"Retried: back to pending, attempts reset: {SCALE} (ids {expected})"
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_regenerate_of_35001_questions_finishes_and_is_logged_once(admin_client):
    many_jobs(SCALE, "completed")
    assert act_on_all(admin_client, QUESTIONS_URL, "regenerate_explanation") == [
        f"Queued {SCALE} explanation job(s); 0 already queued."
    ]
    assert StudyQuestionJob.objects.filter(status="pending").count() == SCALE
    (entry,) = LogEntry.objects.all()
    assert entry.get_change_message().startswith(
        f"Regenerate explanation: {SCALE} job(s) queued for {SCALE} selected question(s)"
    )


def test_a_selection_over_the_limit_changes_nothing_and_names_the_command(
    admin_client, monkeypatch
):
    from studyqueue.admin import common

    monkeypatch.setattr(common, "ACTION_LIMIT", 3)  # a test-sized limit
    for _ in range(4):
        StudyQuestionJobFactory(status="failed")
    (message,) = act_on_all(admin_client, JOBS_URL, "retry_jobs")
    assert message.startswith("Nothing changed: the admin acts on at most 3 rows at once.")
    assert "manage.py retryjobs" in message
    (message,) = act_on_all(admin_client, JOBS_URL, "skip_jobs")
    assert "manage.py skipjobs" in message
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "regenerate_explanation")
    assert "manage.py enqueue" in message
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "download_csv")
    assert "manage.py exportexplanations" in message
    assert StudyQuestionJob.objects.filter(status="failed").count() == 4
    assert not LogEntry.objects.exists()
    # Three are within the limit: done, with an entry each (small sets keep per-row history).
    for job in StudyQuestionJob.objects.all()[:1]:
        StudyQuestionJob.objects.filter(pk=job.pk).update(status="completed")
    assert act_on_all(admin_client, JOBS_URL, "retry_jobs", status="failed") == [
        "Retried 3 job(s)."
    ]
    assert LogEntry.objects.count() == 3


def test_deleting_more_questions_than_the_delete_limit_is_refused(admin_client, monkeypatch):
    from studyqueue.admin import questions

    monkeypatch.setattr(questions, "DELETE_LIMIT", 2)
    for _ in range(3):
        StudyQuestionFactory()
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "delete_selected")
    assert message.startswith("Nothing deleted: select at most 2 questions")
    assert StudyQuestion.objects.count() == 3
    page = admin_client.post(
        QUESTIONS_URL + "?q=What",
        {"action": "delete_selected", "_selected_action": [StudyQuestion.objects.first().pk]},
    )
    assert "Are you sure" in page.content.decode()  # Django's own confirmation, as before


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_csv_download_of_a_big_selection_reads_in_batches(admin_client):
    count = 33_000  # one query with these ids is past SQLite's 32,766 bound parameters
    many_jobs(count, "completed")
    StudyQuestion.objects.update(explanation="Because.")
    response = admin_client.post(
        QUESTIONS_URL,
        {"action": "download_csv", "select_across": "1", "index": "0", "_selected_action": ["1"]},
    )
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == count + 1  # the header
