"""The consumers' records in the admin: listed with their state and what they write with;
stopped and silent ones can be removed, live ones are kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from studyqueue.models import QueueConsumer
from tests.factories import QueueConsumerFactory
from tests.helpers.admin import DASHBOARD_URL, staff

pytestmark = pytest.mark.django_db

CONSUMERS_URL = reverse("admin:studyqueue_queueconsumer_changelist")


def three() -> tuple[QueueConsumer, QueueConsumer, QueueConsumer]:
    now = timezone.now()
    live = QueueConsumerFactory(
        worker_id="live:1",
        model="qwen",
        prompt_label="qwen · max 1024",
        gate_permits="auto",
        gate_limit=4,
    )
    silent = QueueConsumerFactory(worker_id="silent:2", seen_at=now - timedelta(hours=2))
    stopped = QueueConsumerFactory(worker_id="stopped:3", stopped_at=now)
    return live, silent, stopped


def test_the_list_shows_state_model_prompt_and_gate(admin_client):
    three()
    html = admin_client.get(CONSUMERS_URL).content.decode()
    row = html.split(">live:1<")[1].split("</tr>")[0]
    assert ">live</span>" in row and "qwen · max 1024" in row and "auto: limit 4" in row
    assert ">silent</span>" in html.split(">silent:2<")[1].split("</tr>")[0]
    assert "server default" in html.split(">stopped:3<")[1].split("</tr>")[0]
    assert CONSUMERS_URL in admin_client.get(DASHBOARD_URL).content.decode()


def test_an_auto_gate_shows_its_endpoints_stored_limit_not_its_last_report(admin_client):
    from studyqueue.models import GateLimit

    live, _, _ = three()
    GateLimit.objects.create(endpoint=live.llm_url, limit=6, rates={}, reason="climb")
    html = admin_client.get(CONSUMERS_URL).content.decode()
    assert "auto: limit 6" in html.split(">live:1<")[1].split("</tr>")[0]


def test_remove_deletes_stopped_and_silent_records_and_keeps_live_ones(admin_client):
    consumers = three()
    response = admin_client.post(
        CONSUMERS_URL,
        {"action": "remove_gone", "_selected_action": [c.pk for c in consumers]},
        follow=True,
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "Removed 2 consumers.",
        "Kept 1 live consumer: it is running.",
    ]
    assert list(QueueConsumer.objects.values_list("worker_id", flat=True)) == ["live:1"]
    assert LogEntry.objects.filter(action_flag=DELETION).count() == 2


def test_a_live_record_has_no_delete_and_nothing_is_added_or_changed(admin_client):
    live, _, stopped = three()
    live_page = admin_client.get(reverse("admin:studyqueue_queueconsumer_change", args=[live.pk]))
    assert reverse("admin:studyqueue_queueconsumer_delete", args=[live.pk]) not in (
        live_page.content.decode()
    )
    delete_live = reverse("admin:studyqueue_queueconsumer_delete", args=[live.pk])
    assert admin_client.post(delete_live, {"post": "yes"}).status_code == 403
    delete_stopped = reverse("admin:studyqueue_queueconsumer_delete", args=[stopped.pk])
    assert admin_client.post(delete_stopped, {"post": "yes"}).status_code == 302
    assert not QueueConsumer.objects.filter(pk=stopped.pk).exists()
    assert admin_client.get(reverse("admin:studyqueue_queueconsumer_add")).status_code == 403
    assert 'name="worker_id"' not in live_page.content.decode()  # read-only


def test_who_sees_the_dashboard_sees_the_records_but_removes_none():
    consumers = three()
    client = staff("view_studyquestionjob")
    assert client.get(CONSUMERS_URL).status_code == 200
    response = client.post(
        CONSUMERS_URL, {"action": "remove_gone", "_selected_action": [c.pk for c in consumers]}
    )
    assert response.status_code == 200  # the action is not offered: nothing happens
    assert QueueConsumer.objects.count() == 3


def test_the_list_shows_each_server_a_consumer_uses_as_it_found_it(admin_client):
    QueueConsumerFactory(
        worker_id="pool",
        llm_url="http://a:1/v1,http://[redacted]@b:2/v1",
        endpoints=[
            {"name": "http://a:1/v1", "state": "up", "limit": 2},
            {"name": "http://b:2/v1", "state": "down", "limit": 1, "error": "llm_unavailable"},
        ],
    )
    QueueConsumerFactory(worker_id="old", llm_url="http://c:3/v1")  # reported no servers
    html = admin_client.get(CONSUMERS_URL).content.decode()
    assert '<span data-endpoint="http://a:1/v1" data-state="up">http://a:1/v1: up</span>' in html
    assert 'data-state="down">http://b:2/v1: down</span>' in html
    assert "http://c:3/v1" in html
    html = admin_client.get(CONSUMERS_URL, headers={"accept-language": "ko"}).content.decode()
    assert "http://a:1/v1: 정상" in html and "http://b:2/v1: 중단" in html
