"""Prometheus metrics: parsed back with the client library's parser; protected."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from studyqueue.queue.pauses import pause
from tests.factories import ExplanationRevisionFactory, StudyQuestionJobFactory
from tests.helpers.metrics import samples

pytestmark = pytest.mark.django_db

URL = "/studyqueue/metrics"


def test_metrics_hold_the_queue(admin_client):
    now = timezone.now()
    StudyQuestionJobFactory.create_batch(2, status="pending")
    StudyQuestionJobFactory(status="pending", error_code="llm_unavailable")
    reply = ExplanationRevisionFactory(prompt_tokens=40, completion_tokens=7)
    StudyQuestionJobFactory(
        study_question=reply.question, status="completed", completed_at=now, llm_ms=1500,
        revision=reply,
    )  # fmt: skip
    StudyQuestionJobFactory(status="failed", completed_at=now, error_code="llm_rejected")
    pause("session_summary")
    response = admin_client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    got = samples(response.content.decode())
    assert got[("studyqueue_jobs", (("kind", "explanation"), ("status", "pending")))] == 3
    assert got[("studyqueue_jobs", (("kind", "explanation"), ("status", "processing")))] == 0
    finished = "studyqueue_jobs_finished_24h"
    key = (("error_code", "none"), ("kind", "explanation"), ("status", "completed"))
    assert got[(finished, key)] == 1
    assert got[("studyqueue_jobs_waiting_again", (("error_code", "llm_unavailable"),))] == 1
    assert got[("studyqueue_llm_call_seconds_bucket", (("le", "1.0"),))] == 0
    assert got[("studyqueue_llm_call_seconds_bucket", (("le", "2.0"),))] == 1
    assert got[("studyqueue_llm_call_seconds_gsum", ())] == 1.5
    assert got[("studyqueue_llm_tokens_24h", (("type", "prompt"),))] == 40
    assert got[("studyqueue_queue_paused", (("kind", "session_summary"),))] == 1
    assert got[("studyqueue_consumers", (("state", "live"),))] == 0
    assert got[("studyqueue_oldest_pending_age_seconds", ())] >= 0


def test_metrics_need_a_token_or_a_staff_login(client, settings):
    assert client.get(URL).status_code == 401
    settings.STUDYQUEUE = {"METRICS_TOKEN": "s3cret-token"}
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    User.objects.create_user("plain", password="pw")
    client.login(username="plain", password="pw")
    assert client.get(URL).status_code == 401, "a login that is not staff is not enough"
