"""The job admin through the test client: list, detail, actions on every status,
permissions, CSRF."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from studyqueue.admin.common import STATUS_COLOURS
from studyqueue.models import JobKind, JobStatus, StudyQuestionJob, StudyQuestionSet, StudySession
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers.admin import (
    JOBS_URL,
    RESET_URL,
    act,
    one_of_each,
    staff,
    statuses,
)

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------- list and detail


def test_every_status_has_a_badge():
    assert set(STATUS_COLOURS) == set(JobStatus)


def test_changelist_shows_columns_without_n_plus_one(admin_client, django_assert_max_num_queries):
    one_of_each()
    response = admin_client.get(JOBS_URL)
    assert response.status_code == 200
    html = response.content.decode()
    for label in ("Pending", "Processing", "Completed", "Failed", "Skipped", "0/3", "waiting "):
        assert label in html
    StudyQuestionJobFactory.create_batch(40, status="completed", llm_ms=1500)
    with django_assert_max_num_queries(12):
        assert admin_client.get(JOBS_URL).status_code == 200
    assert "1.5s" in admin_client.get(JOBS_URL).content.decode()


@pytest.mark.parametrize(
    "query,expected",
    [
        ("status=failed", {"failed"}),
        ("kind=explanation&status=pending", {"pending"}),
        ("stale=yes", {"processing"}),
        ("error_code=llm_timeout", {"failed"}),
    ],
)
def test_filters(admin_client, query, expected):
    jobs = one_of_each()
    StudyQuestionJob.objects.filter(pk=jobs["failed"].pk).update(error_code="llm_timeout")
    response = admin_client.get(f"{JOBS_URL}?{query}")
    shown = {job.status for job in response.context["cl"].result_list}
    assert shown == expected


def test_created_date_filter_and_search(admin_client):
    old = StudyQuestionJobFactory(study_question__text="ancient question")
    StudyQuestionJob.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(days=40)
    )
    new = StudyQuestionJobFactory(study_question__text="fresh question", error_message="boom")
    # The "Past 7 days" link of the admin's date filter.
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    since = str(midnight - timedelta(days=7))
    response = admin_client.get(JOBS_URL, {"created_at__gte": since})
    assert [j.pk for j in response.context["cl"].result_list] == [new.pk]
    for term, pk in (("ancient", old.pk), ("boom", new.pk), (str(old.pk), old.pk)):
        response = admin_client.get(f"{JOBS_URL}?q={term}")
        assert [j.pk for j in response.context["cl"].result_list] == [pk], term


def test_detail_page_is_read_only_and_escaped(admin_client):
    job = StudyQuestionJobFactory(
        status="failed",
        error_message="<b>bold</b> failure",
        study_question__text="<script>alert('q')</script>",
        study_question__explanation="<img src=x onerror=alert(1)>",
        llm_ms=250,
    )
    url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    html = admin_client.get(url).content.decode()
    assert "<script>alert('q')</script>" not in html
    assert "<img src=x onerror=alert(1)>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt; failure" in html
    assert "250 ms" in html
    assert 'name="status"' not in html, "no editable state fields"
    assert admin_client.post(url, {"status": "pending"}).status_code == 403
    list_html = admin_client.get(JOBS_URL).content.decode()
    assert "&lt;script&gt;" in list_html and "<script>alert('q')" not in list_html


def test_no_add_or_delete_of_jobs(admin_client):
    assert admin_client.get(reverse("admin:studyqueue_studyquestionjob_add")).status_code == 403
    job = StudyQuestionJobFactory()
    url = reverse("admin:studyqueue_studyquestionjob_delete", args=[job.pk])
    assert admin_client.get(url).status_code == 403


# --------------------------------------------------------------------------- actions


def test_retry_action_on_every_status(admin_client, admin_user):
    jobs = one_of_each()
    messages = act(admin_client, "retry_jobs", jobs.values())
    assert messages == [
        "Retried 2 job(s).",
        "3 job(s) left alone: only failed or skipped jobs can be retried.",
    ]
    assert statuses(jobs) == {
        "pending": "pending",
        "processing": "processing",
        "completed": "completed",
        "failed": "pending",
        "skipped": "pending",
    }
    entries = LogEntry.objects.filter(user=admin_user, action_flag=CHANGE)
    assert sorted(int(e.object_id) for e in entries) == sorted(
        [jobs["failed"].pk, jobs["skipped"].pk]
    )
    assert all("Retried" in e.get_change_message() for e in entries)


def test_retry_refuses_a_second_active_job(admin_client):
    question = StudyQuestionFactory()
    active = StudyQuestionJobFactory(study_question=question, status="pending")
    failed = StudyQuestionJobFactory(study_question=question, status="failed")
    messages = act(admin_client, "retry_jobs", [failed])
    assert messages == [
        "Retried 0 job(s).",
        "1 job(s) refused: their question already has an active job of the same kind "
        f"(refused → active: {failed.pk} → {active.pk}).",
    ]
    assert StudyQuestionJob.objects.get(pk=failed.pk).status == "failed"


def test_skip_action_on_every_status(admin_client):
    jobs = one_of_each()
    messages = act(admin_client, "skip_jobs", jobs.values())
    assert messages == ["Skipped 2 job(s).", "3 job(s) left alone: already finished."]
    assert statuses(jobs)["pending"] == "skipped"
    assert statuses(jobs)["processing"] == "skipped"
    assert StudyQuestionJob.objects.get(pk=jobs["pending"].pk).error_code == "operator_skipped"
    assert LogEntry.objects.count() == 2


def test_reset_stale_action_on_every_status(admin_client):
    jobs = one_of_each()
    fresh = StudyQuestionJobFactory(status="processing", heartbeat_at=timezone.now())
    messages = act(admin_client, "reset_stale_jobs", [*jobs.values(), fresh])
    assert messages == [
        "Reset 1 stale job(s) to pending; 0 ended failed (no attempts left).",
        "5 job(s) left alone: not processing, or their heartbeat is recent (threshold 10 min).",
    ]
    assert statuses(jobs)["processing"] == "pending"
    assert StudyQuestionJob.objects.get(pk=fresh.pk).status == "processing"
    assert LogEntry.objects.count() == 1


def test_reset_all_stale_button(admin_client):
    jobs = one_of_each()
    assert admin_client.get(RESET_URL).status_code == 405
    response = admin_client.post(RESET_URL, follow=True)
    assert response.redirect_chain[-1][0] == JOBS_URL
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Reset 1 stale job(s) to pending; 0 ended failed (no attempts left)."]
    assert statuses(jobs)["processing"] == "pending"
    assert "Reset all stale jobs" in admin_client.get(JOBS_URL).content.decode()


def test_reset_all_stale_button_needs_csrf(admin_user):
    one_of_each()
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(RESET_URL).status_code == 403
    assert StudyQuestionJob.objects.filter(status="processing").count() == 1


# --------------------------------------------------------------------------- permissions


def test_staff_without_custom_permissions_sees_no_actions_and_no_button():
    client = staff("view_studyquestionjob")
    one_of_each()
    response = client.get(JOBS_URL)
    assert response.status_code == 200
    html = response.content.decode()
    for action in ("retry_jobs", "skip_jobs", "reset_stale_jobs"):
        assert action not in html
    assert "Reset all stale jobs" not in html
    assert client.post(RESET_URL).status_code == 403
    failed = StudyQuestionJob.objects.get(status="failed")
    client.post(JOBS_URL, {"action": "retry_jobs", "_selected_action": [failed.pk]})
    assert StudyQuestionJob.objects.get(pk=failed.pk).status == "failed"


def test_each_permission_unlocks_its_own_action():
    client = staff("view_studyquestionjob", "retry_studyquestionjob")
    StudyQuestionJobFactory()
    html = client.get(JOBS_URL).content.decode()
    assert "retry_jobs" in html
    assert "skip_jobs" not in html and "reset_stale_jobs" not in html


def test_a_session_or_set_job_names_its_owner_with_a_link_in_the_list_and_on_its_page(
    admin_client,
):
    """A session's summary and a set's notice have no question: never "(deleted)"."""
    when = timezone.now()
    session = StudySession.objects.create(
        learner="kim-07", started_at=when, ended_at=when, right=1, total=2, fingerprint="f"
    )
    question_set = StudyQuestionSet.objects.create(name="midterm")
    jobs = [
        StudyQuestionJobFactory(
            study_question=None, study_session=session, kind=JobKind.SESSION_SUMMARY
        ),
        StudyQuestionJobFactory(
            study_question=None, question_set=question_set, kind=JobKind.SET_NOTICE
        ),
    ]
    owners = [
        ("studysession", session.pk, "Study session", "kim-07"),
        ("studyquestionset", question_set.pk, "Question set", "midterm"),
    ]
    listed = admin_client.get(JOBS_URL).content.decode()
    assert "(deleted)" not in listed
    for job, (model, pk, name, words) in zip(jobs, owners, strict=True):
        page = admin_client.get(reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]))
        link = f'<a href="{reverse(f"admin:studyqueue_{model}_change", args=[pk])}">#{pk}</a>'
        for html in (listed, page.content.decode()):
            assert f"{name} {link} {words}" in html
        assert "(deleted)" not in page.content.decode()
