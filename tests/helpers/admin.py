"""What the admin tests share: the pages' URLs, a job in every status, acting on a
selection as the admin's form posts it, a staff client with given permissions."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from studyqueue.models import JobStatus, StudyQuestion, StudyQuestionJob
from tests.factories import StudyQuestionJobFactory

JOBS_URL = reverse("admin:studyqueue_studyquestionjob_changelist")
RESET_URL = reverse("admin:studyqueue_studyquestionjob_reset_stale")
DASHBOARD_URL = reverse("admin:studyqueue_queuedashboard_changelist")
QUESTIONS_URL = reverse("admin:studyqueue_studyquestion_changelist")


def one_of_each() -> dict[str, StudyQuestionJob]:
    """A job in every status; the processing one is stale."""
    jobs = {status: StudyQuestionJobFactory(status=status) for status in JobStatus.values}
    StudyQuestionJob.objects.filter(pk=jobs["processing"].pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1), started_at=timezone.now()
    )
    return jobs


def act(client: Client, action: str, jobs) -> list[str]:
    response = client.post(
        JOBS_URL,
        {"action": action, "_selected_action": [j.pk for j in jobs]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


def statuses(jobs: dict[str, StudyQuestionJob]) -> dict[str, str]:
    return {k: StudyQuestionJob.objects.get(pk=j.pk).status for k, j in jobs.items()}


def staff(*perms: str) -> Client:
    user = User.objects.create_user("op", password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


PAUSES_URL = reverse("admin:studyqueue_queuepause_changelist")
PAUSE_ADD_URL = reverse("admin:studyqueue_queuepause_add")
DATA_URL = reverse("admin:studyqueue_queuedashboard_data")


SCALE = 35_001  # the "select all" of the outside probe


def many_jobs(count: int, status: str) -> list[int]:
    """``count`` jobs in ``status``, each on its own question, made in bulk."""
    questions = StudyQuestion.objects.bulk_create(
        [StudyQuestion(text=f"Q{i}?") for i in range(count)], batch_size=2000
    )
    jobs = StudyQuestionJob.objects.bulk_create(
        [StudyQuestionJob(study_question=q, kind="explanation", status=status) for q in questions],
        batch_size=2000,
    )
    return sorted(j.pk for j in jobs)


def act_on_all(client: Client, url: str, action: str, **filters: str) -> list[str]:
    """The action on "select all N" of the (filtered) list, as the admin's page posts it."""
    response = client.post(
        url + ("?" + "&".join(f"{k}={v}" for k, v in filters.items()) if filters else ""),
        {"action": action, "select_across": "1", "index": "0", "_selected_action": ["1"]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]
