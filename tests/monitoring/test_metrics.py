"""Prometheus metrics: parsed back with the client library's parser; protected."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from studyqueue.queue.pauses import pause
from tests.factories import ExplanationRevisionFactory, StudyQuestionJobFactory
from tests.helpers.admin import DASHBOARD_URL
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


def test_wait_and_run_times_per_kind_are_the_last_hours_median_and_95th(admin_client):
    now = timezone.now()
    for n in range(1, 21):  # waited n s once due, ran 2n s; ended within the hour
        due = now - timedelta(minutes=30)
        started = due + timedelta(seconds=n)
        StudyQuestionJobFactory(
            status="completed", run_after=due, started_at=started,
            completed_at=started + timedelta(seconds=2 * n),
        )  # fmt: skip
    old = now - timedelta(hours=2)  # ended before the hour: not counted
    StudyQuestionJobFactory(
        status="completed", run_after=old, started_at=old + timedelta(seconds=999),
        completed_at=old + timedelta(seconds=1999),
    )  # fmt: skip
    got = samples(admin_client.get(URL).content.decode())

    def seconds(phase: str, quantile: str) -> float:
        labels = (("kind", "explanation"), ("phase", phase), ("quantile", quantile))
        return got[("studyqueue_job_seconds", labels)]

    assert seconds("wait", "0.5") == pytest.approx(10.5)
    assert seconds("wait", "0.95") == pytest.approx(19.05)
    assert seconds("run", "0.5") == pytest.approx(21.0)
    assert seconds("run", "0.95") == pytest.approx(38.1)
    assert not any(name == "studyqueue_job_seconds" and ("kind", "verification") in labels
                   for name, labels in got)  # fmt: skip
    dashboard = admin_client.get(DASHBOARD_URL).content.decode()
    assert "10.5 / 19.1 s" in dashboard and "21.0 / 38.1 s" in dashboard
