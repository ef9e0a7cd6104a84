"""The one collector (``monitoring.stats``): the dashboard, its JSON view and the metrics read
the same numbers from it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from studyqueue.monitoring import stats
from studyqueue.queue.pauses import pause
from tests.factories import ExplanationRevisionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


def _queue_with_history() -> None:
    now = timezone.now()
    StudyQuestionJobFactory.create_batch(3, status="pending")
    StudyQuestionJobFactory(status="pending", error_code="llm_overloaded")
    StudyQuestionJobFactory(status="processing", heartbeat_at=now)
    # The server said of one reply how much of its prompt it had cached, not of the other.
    for minutes, tokens, cached in ((5, 40, 30), (70, 60, None)):
        reply = ExplanationRevisionFactory(
            prompt_tokens=tokens, completion_tokens=tokens // 2, cached_tokens=cached
        )
        StudyQuestionJobFactory(
            study_question=reply.question,
            status="completed",
            completed_at=now - timedelta(minutes=minutes),
            llm_ms=1200,
            revision=reply,
        )
    StudyQuestionJobFactory.create_batch(
        2, status="failed", completed_at=now, error_code="llm_timeout"
    )
    StudyQuestionJobFactory(status="skipped", completed_at=now, error_code="operator_skipped")
    pause("session_summary")


def _metrics(admin_client) -> dict[tuple, float]:  # type: ignore[no-untyped-def]
    text = admin_client.get("/studyqueue/metrics").content.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_dashboard_its_json_and_the_metrics_agree(admin_client):
    _queue_with_history()
    page = admin_client.get(reverse("admin:studyqueue_queuedashboard_changelist"))
    shown = page.context["stats"]
    data = admin_client.get(reverse("admin:studyqueue_queuedashboard_data")).json()
    got = _metrics(admin_client)

    def metric(status: str) -> float:
        return got[("studyqueue_jobs", (("kind", "explanation"), ("status", status)))]

    assert data["pending"] == sum(shown.active["pending"].values()) == metric("pending") == 4
    assert data["processing"] == metric("processing") == 1
    finished = "studyqueue_jobs_finished_24h"
    for status, n in (("completed", 2), ("failed", 2), ("skipped", 1)):
        from_metrics = sum(v for (name, labels), v in got.items()
                           if name == finished and ("status", status) in labels)  # fmt: skip
        assert shown.finished_24h[status]["explanation"] == from_metrics == n, status
    assert shown.top_errors == [("llm_timeout", 2), ("llm_overloaded", 1), ("operator_skipped", 1)]
    waiting = ("studyqueue_jobs_waiting_again", (("error_code", "llm_overloaded"),))
    assert got[waiting] == 1
    assert data["paused"] == [p.kind for p in shown.pauses] == ["session_summary"]
    assert got[("studyqueue_queue_paused", (("kind", "session_summary"),))] == 1
    assert got[("studyqueue_llm_tokens_24h", (("type", "prompt"),))] == 100
    assert stats.tokens(timezone.now()) == stats.TokenTotals(100, 50, 30, 40)
    # The cached share counts only the replies that said (30 of 40, not 30 of 100).
    assert got[("studyqueue_llm_tokens_24h", (("type", "cached"),))] == 30
    assert got[("studyqueue_llm_cached_share_24h", ())] == shown.tokens.cached_share == 0.75
    tile = page.content.decode().split('id="sq-cached"', 1)[1].split("</div></div>", 1)[0]
    assert "75 %" in tile
    assert sum(h.llm_ms for h in shown.hours) == 2400


def test_no_cached_share_when_no_server_said(admin_client):
    """A server that never reports its cache shows an unknown share, not a cold cache."""
    reply = ExplanationRevisionFactory(prompt_tokens=50, completion_tokens=5, cached_tokens=None)
    StudyQuestionJobFactory(
        study_question=reply.question, status="completed", completed_at=timezone.now(),
        llm_ms=100, revision=reply,
    )  # fmt: skip
    totals = stats.tokens(timezone.now())
    assert (totals.prompt, totals.cached, totals.cached_share) == (50, 0, None)
    assert totals.cached_percent is None
    share = _metrics(admin_client)[("studyqueue_llm_cached_share_24h", ())]
    assert share != share  # NaN


def test_collect_is_split_into_named_parts():
    """No part of the collector is longer than a screen (the old collect was 65 lines)."""
    import inspect

    for name, part in inspect.getmembers(stats, inspect.isfunction):
        if part.__module__ == stats.__name__:
            assert len(inspect.getsource(part).splitlines()) <= 40, name


def test_the_backlog_estimate_is_what_waits_at_the_servers_recent_rate(admin_client):
    """Right after an import, the rate is the recent work's own pace, not the hour's: two
    explanations of 100 tokens, started 20 s ago, completed 10 s apart make 10 tok/s, so the
    six waiting take about a minute (the last hour's pace said two hours)."""
    now = timezone.now()
    StudyQuestionJobFactory.create_batch(6, status="pending")
    assert stats.collect(now).backlog_done_in is None  # no rate: nothing completed lately
    for ended in (10, 0):
        revision = ExplanationRevisionFactory(completion_tokens=100)
        StudyQuestionJobFactory(
            study_question=revision.question,
            status="completed",
            started_at=now - timedelta(seconds=20),
            completed_at=now - timedelta(seconds=ended),
            revision=revision,
        )
    StudyQuestionJobFactory(status="completed", completed_at=now - timedelta(minutes=61))
    shown = stats.collect(now)
    assert (shown.backlog, shown.explanations_waiting, shown.completed_recently) == (6, 6, 2)
    assert shown.backlog_done_in == timedelta(seconds=60)
    tile = admin_client.get(reverse("admin:studyqueue_queuedashboard_changelist")).content
    tile = tile.decode().split('id="sq-backlog"', 1)[1].split("</div></div>", 1)[0]
    # The page reads its own clock, a moment after ``now`` on a loaded machine: 20 s or a few more.
    found = re.search(
        r"until the 6 explanations waiting are done, at (\d+) tok/s over the last (\d+) s", tile
    )
    assert found is not None, tile
    rate, window = int(found[1]), int(found[2])
    assert 20 <= window <= 25 and abs(rate - 200 / window) <= 1, tile
    data = admin_client.get(reverse("admin:studyqueue_queuedashboard_data")).json()
    # Read t s after ``now``, one job completed in the 10 + t s since the first completion:
    # six take 60 + 6t s.
    late = (timezone.now() - now).total_seconds()
    assert 59 <= data["backlog_done_in_seconds"] <= 61 + 6 * late, (data, late)


def test_the_gate_tile_shows_the_live_consumers_limits(admin_client):
    from tests.factories import QueueConsumerFactory

    QueueConsumerFactory(gate_permits="auto", gate_limit=6)
    QueueConsumerFactory(gate_permits="2", gate_limit=2)
    QueueConsumerFactory(gate_limit=9, stopped_at=timezone.now())  # not live: not shown
    assert stats.collect().live_gate_limits == [2, 6]
    page = admin_client.get(reverse("admin:studyqueue_queuedashboard_changelist")).content
    tile = page.decode().split('id="sq-gate-limit"', 1)[1].split("</div></div>", 1)[0]
    assert '<div class="n">2 · 6</div>' in tile


def test_a_url_longer_than_the_column_finds_its_servers_shared_limit():
    """The gate stores its server's row cut to the column; the dashboard finds that row for the
    consumer's gate and for the server's line, though ``llm_url`` was cut another way."""
    from studyqueue.models import QueueConsumer, fit
    from studyqueue.services import gate_limits
    from studyqueue.services.endpoints import Endpoint
    from tests.factories import QueueConsumerFactory

    endpoint = Endpoint(url="http://user:secret@127.0.0.1:8080/v1/" + "p" * 600, permits="auto")
    gate_limits.sync(endpoint.name, limit=6, rates={6: 42.0})
    QueueConsumerFactory(
        gate_permits="auto",
        gate_limit=1,
        llm_url=fit(QueueConsumer, "llm_url", endpoint.shown_url),
        endpoints=[{"name": endpoint.name, "state": "up", "limit": 1, "auto": True}],
    )
    collected = stats.collect()
    (consumer,) = collected.live_consumers
    assert collected.shared_limit(consumer) is not None
    assert collected.gate_limit_of(consumer) == 6
    assert [row.limit for row in collected.endpoints] == [6]
