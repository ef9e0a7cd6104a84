"""Pausing and resuming the queue from the admin: its own permission and the admin log."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from tests.helpers.admin import (
    DASHBOARD_URL,
    JOBS_URL,
    PAUSE_ADD_URL,
    PAUSES_URL,
)

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------- pause, consumers, live


def test_an_operator_pauses_and_resumes_from_the_admin_with_the_log_written(admin_client):
    from django.contrib.admin.models import ADDITION, DELETION

    from studyqueue.models import QueuePause

    response = admin_client.post(PAUSE_ADD_URL, {"kind": "", "reason": "GPU for training"})
    assert response.status_code == 302
    pause = QueuePause.objects.get()
    assert (pause.kind, pause.reason, pause.paused_by) == ("", "GPU for training", "admin")
    assert LogEntry.objects.filter(action_flag=ADDITION, object_id=str(pause.pk)).exists()
    jobs_page = admin_client.get(JOBS_URL).content.decode()
    assert "Paused for every kind" in jobs_page and "GPU for training" in jobs_page
    dashboard_page = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'class="sq-note sq-paused" data-kind="all"' in dashboard_page

    response = admin_client.post(
        PAUSES_URL, {"action": "resume_selected", "_selected_action": [pause.pk]}, follow=True
    )
    assert "Resumed for every kind." in response.content.decode()
    assert not QueuePause.objects.exists()
    assert LogEntry.objects.filter(action_flag=DELETION, object_id=str(pause.pk)).exists()


def test_pausing_needs_its_own_permission(client):
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_studyquestionjob"))
    client.force_login(staff)
    assert client.get(PAUSES_URL).status_code == 200  # may see the pauses
    assert client.post(PAUSE_ADD_URL, {"kind": "", "reason": "x"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    assert client.post(PAUSE_ADD_URL, {"kind": "", "reason": "x"}).status_code == 302
