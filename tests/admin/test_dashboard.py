"""The queue dashboard: its numbers on a known data set, its notices, its live data view
and who sees them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from studyqueue.models import StudyQuestionJob
from studyqueue.monitoring.stats import collect
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionJobFactory
from tests.helpers import clock
from tests.helpers.admin import (
    DASHBOARD_URL,
    DATA_URL,
    JOBS_URL,
    staff,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen_now(monkeypatch) -> datetime:
    """The clock stopped in the middle of an hour (the last full one): the page the test
    asks for buckets its data as the test placed it, whatever the minute it runs at."""
    now = clock.middle_of_last_full_hour(timezone.now())
    monkeypatch.setattr(timezone, "now", lambda: now)
    return now


# --------------------------------------------------------------------------- dashboard


def test_dashboard_numbers_on_a_known_data_set(admin_client, frozen_now):
    now = frozen_now
    StudyQuestionJobFactory.create_batch(3)  # pending
    old_pending = StudyQuestionJobFactory()
    StudyQuestionJob.objects.filter(pk=old_pending.pk).update(created_at=now - timedelta(hours=2))
    StudyQuestionJobFactory(
        status="processing", started_at=now, heartbeat_at=now - timedelta(hours=1)
    )
    StudyQuestionJobFactory(status="processing", started_at=now, heartbeat_at=now)
    StudyQuestionJobFactory.create_batch(
        4, status="completed", completed_at=now - timedelta(minutes=5), llm_ms=2500
    )
    StudyQuestionJobFactory.create_batch(
        2, status="failed", completed_at=now - timedelta(hours=3), error_code="llm_timeout"
    )
    StudyQuestionJobFactory(status="completed", completed_at=now - timedelta(days=3))
    StudyQuestionJobFactory(
        kind="session_summary", status="skipped", completed_at=now, error_code="unsupported_kind"
    )

    stats = collect(now)
    assert stats.active == {"pending": {"explanation": 4}, "processing": {"explanation": 2}}
    assert stats.finished_24h == {
        "completed": {"explanation": 4},
        "failed": {"explanation": 2},
        "skipped": {"session_summary": 1},
    }
    assert stats.stale == 1
    assert stats.oldest_pending_age >= timedelta(hours=2)
    assert len(stats.hours) == 24
    five_minutes_ago = (now - timedelta(minutes=5)).replace(minute=0, second=0, microsecond=0)
    (bucket,) = [h for h in stats.hours if h.start == five_minutes_ago]
    assert (bucket.completed, bucket.llm_ms) == (4, 10_000)
    assert sum(h.completed for h in stats.hours) == 4
    assert sum(h.failed for h in stats.hours) == 2
    assert stats.top_errors == [("llm_timeout", 2), ("unsupported_kind", 1)]
    assert stats.total_estimate == 14 or stats.total_is_estimate

    html = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'id="sq-status-kind"' in html
    assert "<td>llm_timeout" in html.replace('<td class="label" style="width:130px">', "<td>")
    assert "10.0 s" in html and "4 / 0" in html
    assert "2h 0m" in html


def test_dashboard_is_staff_only():
    anonymous = Client()
    assert anonymous.get(DASHBOARD_URL).status_code == 302  # to the login page
    assert staff().get(DASHBOARD_URL).status_code == 403


def test_dashboard_is_linked_from_the_app_index_and_the_changelist(admin_client):
    app_index = admin_client.get(reverse("admin:app_list", args=["studyqueue"])).content.decode()
    assert DASHBOARD_URL in app_index
    assert DASHBOARD_URL in admin_client.get(JOBS_URL).content.decode()


def test_the_dashboard_says_when_no_consumer_runs_and_when_the_llm_is_down(admin_client):
    from studyqueue.models import QueueConsumer

    assert 'id="sq-no-consumer"' in admin_client.get(DASHBOARD_URL).content.decode()
    now = timezone.now()
    QueueConsumer.objects.create(
        worker_id="gpu-box:42",
        host="gpu-box",
        pid=42,
        started_at=now,
        seen_at=now,
        interval_seconds=60,
        llm_url="http://[redacted]@127.0.0.1:8080/v1",
        breaker_open=True,
        breaker_since=now,
        breaker_error="llm_unavailable",
    )
    html = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'id="sq-no-consumer"' not in html
    assert 'id="sq-llm-down"' in html
    assert 'data-worker="gpu-box:42" data-state="live"' in html


def test_the_live_data_view_needs_the_same_permission(admin_client, client):
    StudyQuestionJobFactory(status="pending")
    data = admin_client.get(DATA_URL).json()
    assert (data["pending"], data["consumers_live"], data["paused"]) == (1, 0, [])
    assert 'id="sq-status-kind"' in data["html"] and data["updated_at"]
    staff = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(DATA_URL).status_code == 403


def test_the_consumers_panel_and_the_dashboard_show_the_adaptive_gate(admin_client):
    from studyqueue.models import GateLimit, QueueConsumer

    now = timezone.now()
    url = "http://127.0.0.1:8080/v1"
    for worker, gate in (("auto-box:1", "auto"), ("fixed-box:2", "2")):
        QueueConsumer.objects.create(
            worker_id=worker,
            host="box",
            pid=1,
            started_at=now,
            seen_at=now,
            interval_seconds=60,
            llm_url=url,
            gate_permits=gate,
        )
    GateLimit.objects.create(
        endpoint=url, limit=4, rates={"1": 20.04, "2": 39.9, "4": 80.5, "8": 81.0}, reason="climb"
    )
    html = admin_client.get(DASHBOARD_URL).content.decode()
    auto_row = html.split('data-worker="auto-box:1"')[1].split("</tr>")[0]
    assert '<td class="sq-gate">auto: limit 4 (80.5 tokens/s)</td>' in auto_row
    fixed_row = html.split('data-worker="fixed-box:2"')[1].split("</tr>")[0]
    assert '<td class="sq-gate">2</td>' in fixed_row
    table = html.split('id="sq-gate-limits"')[1].split("</table>")[0]
    assert f'data-endpoint="{url}" data-limit="4"' in table
    assert "1: 20.0 · 2: 39.9 · <strong>4: 80.5</strong> · 8: 81.0" in table
    assert (
        '<span class="sq-gate-reason" data-reason="climb">raised: more calls paid</span>' in table
    )


def _cells(html: str, worker: str) -> dict[str, str]:
    """A consumer row of the dashboard, by its column headers."""
    table = html.split('id="sq-consumers"')[1].split("</table>")[0]
    heads = re.findall(r"<th>(.*?)</th>", table.split("</thead>")[0])
    row = table.split(f'data-worker="{worker}"')[1].split("</tr>")[0]
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
    return dict(zip(heads, cells, strict=True))


def test_a_drain_shows_the_gate_limit_and_job_counts_of_now_not_of_the_last_report(
    admin_client,
):
    """The consumer reports at a cycle's edges; its gate and its jobs move in between. The
    tile, the consumer row and the limits panel show one limit: the stored one; the row's
    counts are the jobs table's."""
    from studyqueue.explanations.prompts import current_version
    from studyqueue.models import JobStatus
    from studyqueue.queue import presence, transitions
    from studyqueue.services import gate_limits

    url, worker = "http://127.0.0.1:8080/v1", "drain-box:1"
    prompt = current_version()
    presence.record_start(worker, interval=60, llm_url=url, prompt=prompt, gate="auto")
    presence.record_report(
        worker,
        presence.Report(
            breaker_open=False,
            breaker_since=None,
            breaker_error="",
            gate_limit=1,
        ),
        prompt=prompt,
    )
    gate_limits.sync(url, limit=1, rates={1: 20.0})
    StudyQuestionJobFactory.create_batch(14)
    jobs = StudyQuestionJob.objects.filter(worker_id=worker)
    previous = 1
    for limit in (2, 4, 8):  # the gate climbs mid-cycle: no report in between
        gate_limits.sync(
            url, limit=limit, rates={limit: 10.0 * limit}, changed_from=previous, reason="climb"
        )
        previous = limit
        claimed = transitions.claim(worker_id=worker, limit=limit)
        for job in claimed[: limit // 2]:
            transitions.complete(job, llm_ms=189)
        html = admin_client.get(DASHBOARD_URL).content.decode()
        tile = html.split('id="sq-gate-limit"')[1].split('class="l"')[0]
        panel = re.search(r'data-endpoint="[^"]+" data-limit="(\d+)"', html)
        assert panel is not None and panel.group(1) == str(limit)
        assert re.sub(r"<[^>]+>|[^0-9]", "", tile.split(">", 1)[1]) == str(limit), tile
        row = _cells(html, worker)
        assert row["gate"].startswith(f"auto: limit {limit}"), row
        assert row["running"] == str(jobs.filter(status=JobStatus.PROCESSING).count()), row
        assert row["completed (24 h)"] == str(jobs.filter(status=JobStatus.COMPLETED).count())
        data = admin_client.get(DATA_URL).json()
        assert data["gate_limits"] == [limit]
        assert f'data-limit="{limit}"' in data["html"]
    assert (row["running"], row["completed (24 h)"]) == ("7", "7")  # 2+4+8 claimed, 1+2+4 done


def test_a_consumer_whose_url_is_spelled_otherwise_shows_its_servers_shared_limit(admin_client):
    from studyqueue.models import GateLimit, QueueConsumer

    now = timezone.now()
    QueueConsumer.objects.create(
        worker_id="auto-box:1", host="box", pid=1, started_at=now, seen_at=now,
        interval_seconds=60, llm_url="http://[redacted]@LocalHost:8080/v1/", gate_permits="auto",
    )  # fmt: skip
    GateLimit.objects.create(endpoint="http://127.0.0.1:8080/v1", limit=4, rates={"4": 80.5})
    html = admin_client.get(DASHBOARD_URL).content.decode()
    auto_row = html.split('data-worker="auto-box:1"')[1].split("</tr>")[0]
    assert '<td class="sq-gate">auto: limit 4 (80.5 tokens/s)</td>' in auto_row


@pytest.mark.parametrize("rates", [[20.0, 40.0], "80.5", 7])
def test_a_gate_limit_whose_rates_are_not_an_object_shows_no_measures(admin_client, rates):
    from studyqueue.models import GateLimit, QueueConsumer

    now = timezone.now()
    url = "http://127.0.0.1:8080/v1"
    QueueConsumer.objects.create(
        worker_id="auto-box:1", host="box", pid=1, started_at=now, seen_at=now,
        interval_seconds=60, llm_url=url, gate_permits="auto",
    )  # fmt: skip
    GateLimit.objects.create(endpoint=url, limit=4)
    GateLimit.objects.update(rates=rates)  # a hand edit, a bad restore
    response = admin_client.get(DASHBOARD_URL)
    assert response.status_code == 200
    html = response.content.decode()
    auto_row = html.split('data-worker="auto-box:1"')[1].split("</tr>")[0]
    assert '<td class="sq-gate">auto: limit 4</td>' in auto_row
    assert admin_client.get(DATA_URL).status_code == 200


def test_the_outdated_tile_counts_against_the_live_consumers_and_notes_doubts(admin_client):
    from studyqueue.explanations.prompts import current_version
    from tests.factories import QueueConsumerFactory, StudyQuestionFactory

    StudyQuestionFactory(explanation="x", explanation_prompt_version="aaaaaaaaaaaa")
    StudyQuestionFactory(explanation="y", explanation_prompt_version="bbbbbbbbbbbb")
    html = admin_client.get(DASHBOARD_URL).content.decode()
    tile = html.split('id="sq-outdated"')[1].split("</div></div>")[0]
    assert f'data-versions="{current_version().hash}" data-live="no"' in tile
    assert "against these settings: no live consumer" in tile and ">2</a>" in tile

    QueueConsumerFactory(prompt_version="aaaaaaaaaaaa", prompt_label="qwen · aaaaaaa")
    QueueConsumerFactory(prompt_version="bbbbbbbbbbbb", prompt_label="other · bbbbbbb")
    html = admin_client.get(DASHBOARD_URL).content.decode()
    tile = html.split('id="sq-outdated"')[1].split("</div></div>")[0]
    assert 'data-versions="aaaaaaaaaaaa bbbbbbbbbbbb" data-live="yes"' in tile
    assert "against aaaaaaa, bbbbbbb, the live consumers'" in tile and ">0</a>" in tile
    notes = html.split('class="sq-note sq-version-warning">')[1:]
    assert [n.split("</div>")[0][:36] for n in notes] == [
        "The live consumers disagree on the p",
        "The prompt version of these settings",
    ]
    assert "qwen · aaaaaaa" in html.split('id="sq-consumers"')[1]  # each consumer's prompt
    data = admin_client.get(DATA_URL).json()
    assert (data["outdated"], data["outdated_against"], data["outdated_against_live"]) == (
        0,
        ["aaaaaaaaaaaa", "bbbbbbbbbbbb"],
        True,
    )


def test_each_hourly_metric_is_one_row_of_24_bars_with_its_values_as_text(admin_client, frozen_now):
    from tests.factories import ExplanationRevisionFactory

    now = frozen_now
    reply = ExplanationRevisionFactory(first_token_ms=450, tokens_per_second=31.25)
    StudyQuestionJobFactory(
        study_question=reply.question, status="completed", completed_at=now, llm_ms=1500,
        revision=reply,
    )  # fmt: skip
    html = admin_client.get(DASHBOARD_URL).content.decode()
    hour = timezone.localtime(now).strftime("%H:00")
    for chart, figure, newest in (
        ("sq-throughput", "1 / 0", f"{hour}: 1 / 0"),
        ("sq-llm", "1.5 s", f"{hour}: 1.5 s"),
        ("sq-ttft", "last: 0.45 s", f"{hour}: 0.45 s"),
        ("sq-tps", "last: 31.2", f"{hour}: 31.2"),
    ):
        row = html.split(f'id="{chart}"', 1)[1].split('<div class="sq-chart"', 1)[0]
        assert row.count('<span class="sq-col"') == 24, chart
        assert f'<span class="sq-chart-total">{figure}</span>' in row, chart
        assert row.split('class="sq-col" title="')[-1].startswith(newest), chart
        label = row.split('aria-label="', 1)[1].split('"', 1)[0]
        assert label.endswith(newest), chart  # empty hours are left out of the text
    assert 'id="sq-throughput"' in admin_client.get(DATA_URL).json()["html"]


@pytest.mark.parametrize("minute", [0, 2, 5, 30, 58, 59])
def test_the_busy_day_fills_the_same_bars_at_any_minute(minute):
    """The browser test's day, made at several minutes of an hour and shown 20 s later:
    each hour's completions in their own bar, this hour's in the newest."""
    from tests.helpers import busy_day

    now = clock.hour_of(timezone.now()) - 2 * clock.HOUR + timedelta(minutes=minute, seconds=30)
    busy_day.make(now)
    shown = collect(now + timedelta(seconds=20))
    assert (shown.hours[-1].completed, shown.hours[-1].failed) == (1, 0)
    by_age = list(reversed(shown.hours))
    assert [h.completed for h in by_age] == [busy_day.completions_in(k) for k in range(24)]
    assert by_age[busy_day.FAILED_HOURS_AGO].failed == 2


@pytest.mark.django_db(transaction=True)
def test_the_llm_servers_table_shows_each_server_as_the_consumers_found_it(
    admin_client, llm_server, settings, free_port, make_consumer
):
    """A consumer with two servers, one of them down, drains three jobs: the table shows the
    one that answered up with what it served in the last hour, the other down with its error."""
    from tests.factories import StudyQuestionFactory

    dead = f"http://127.0.0.1:{free_port}/v1"
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "LLM_URL": f"{llm_server.url},{dead}",
        "BREAKER_BASE_SECONDS": 60,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    for i in range(3):
        enqueue(StudyQuestionFactory(text=f"What is {i} + 1?"))
    consumer = make_consumer(worker_id="pool-box:1")
    assert consumer.run_cycle().outcomes == {"completed": 3}
    html = admin_client.get(DASHBOARD_URL).content.decode()
    table = html.split('id="sq-endpoints"')[1].split("</table>")[0]
    up = table.split(f'data-endpoint="{llm_server.url}"')[1].split("</tr>")[0]
    down = table.split(f'data-endpoint="{dead}"')[1].split("</tr>")[0]
    assert 'data-state="up"' in up and "3 calls, 21 tokens" in up
    assert 'data-state="down"' in down and "down for 1 consumer" in down
    assert "llm_unavailable" in down and "0 calls, 0 tokens" in down


@pytest.mark.django_db(transaction=True)
def test_a_server_that_rejects_every_call_is_named_with_its_reason(
    admin_client, llm_server, settings, make_consumer
):
    """An LLM_URL without /v1: the calls get 404, the job waits with its attempts kept, and
    the dashboard says which server rejects every call, and why (the URL it meant)."""
    from tests.factories import StudyQuestionFactory

    root = llm_server.url.removesuffix("/v1")
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": root, "BREAKER_BASE_SECONDS": 60}
    job = enqueue(StudyQuestionFactory()).job
    make_consumer(worker_id="box:1").run_cycle()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 0)
    html = admin_client.get(DASHBOARD_URL).content.decode()
    banner = html.split('class="sq-alert sq-llm-rejecting"')[1].split("</div>")[0]
    assert f"The LLM server {root} rejects every call" in banner
    assert f"did you mean {root}/v1?" in banner


@pytest.mark.django_db(transaction=True)
def test_with_the_server_down_the_backlog_has_no_estimate_and_says_why(
    admin_client, llm_server, settings, make_consumer
):
    """A rate measured before the server went down is no rate of what it does now: the tile
    says there is no estimate and why, instead of "≈ 64s … at 0 tok/s"."""
    from tests.factories import StudyQuestionFactory

    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "BREAKER_BASE_SECONDS": 60,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    for i in range(2):
        enqueue(StudyQuestionFactory(text=f"What is {i} + 1?"))
    consumer = make_consumer(worker_id="box:1")
    assert consumer.run_cycle().outcomes == {"completed": 2}
    llm_server.stop()
    enqueue(StudyQuestionFactory(text="What is 9 + 1?"))
    assert consumer.run_cycle().outcomes == {"released": 1}
    html = admin_client.get(DASHBOARD_URL).content.decode()
    tile = html.split('id="sq-backlog"')[1].split("</div></div>")[0]
    assert "no estimate: every LLM server is failing, so nothing is written" in tile, tile
    assert "≈" not in tile and "tok/s" not in tile
