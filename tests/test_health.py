"""Health: the command and the two endpoints, passing and failing for each reason."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from studyqueue.models import QueueConsumer

pytestmark = pytest.mark.django_db(transaction=True)


def live_consumer(**fields) -> QueueConsumer:  # type: ignore[no-untyped-def]
    now = timezone.now()
    defaults = {
        "worker_id": "c1",
        "host": "h",
        "pid": 1,
        "started_at": now,
        "seen_at": now,
        "interval_seconds": 60,
        "llm_url": "http://x/v1",
    }
    return QueueConsumer.objects.create(**{**defaults, **fields})


def health(*args: str) -> str:
    out = StringIO()
    call_command("studyqueue_health", *args, stdout=out)
    return out.getvalue()


def test_all_healthy(llm_server):
    live_consumer()
    text = health()
    assert text.startswith("ok: db: the database answers and is migrated; consumer: 1 consumer")
    assert "llm: the LLM server at http://127.0.0.1:" in text


def test_each_part_fails_with_its_own_reason(settings, free_port, llm_server):
    with pytest.raises(CommandError, match=r"^consumer: no consumer has run a cycle"):
        health("--consumer")
    live_consumer(seen_at=timezone.now() - timedelta(minutes=5))  # silent: 2 intervals
    with pytest.raises(CommandError, match=r"^consumer: no consumer"):
        health("--consumer")
    settings.STUDYQUEUE = {"LLM_URL": f"http://user:hunter22@127.0.0.1:{free_port}/v1"}
    with pytest.raises(CommandError) as info:
        health("--llm")
    assert str(info.value).startswith("llm: the LLM server is unreachable")
    assert "hunter22" not in str(info.value)
    assert health("--db").startswith("ok: db:")


def test_an_llm_server_without_a_model_list_is_not_ready(settings, llm_server):
    settings.STUDYQUEUE = {"LLM_URL": llm_server.url.replace("/v1", "/nope")}
    with pytest.raises(CommandError, match="answered HTTP 404 without a model list"):
        health("--llm")


def test_unapplied_migrations_fail_the_db_check():
    call_command("migrate", "studyqueue", "0006_explanation_revisions", verbosity=0)
    try:
        with pytest.raises(CommandError, match=r"^db: migrations are not applied"):
            health("--db")
    finally:
        call_command("migrate", "studyqueue", verbosity=0)


def test_the_endpoints_need_no_login_and_answer_json(client, llm_server):
    live = client.get("/studyqueue/healthz")
    assert live.status_code == 200 and json.loads(live.content)["status"] == "ok"
    ready = client.get("/studyqueue/readyz")
    body = json.loads(ready.content)
    assert ready.status_code == 503 and body["status"] == "fail"
    assert body["checks"]["consumer"]["ok"] is False and body["checks"]["db"]["ok"] is True
    live_consumer()
    assert client.get("/studyqueue/readyz").status_code == 200
