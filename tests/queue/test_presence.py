"""Each consumer's record of itself, and how the dashboard reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from studyqueue.models import QueueConsumer
from studyqueue.queue import presence
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.pauses import pause
from studyqueue.queue.presence import Liveness
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_consumer_records_its_start_its_cycles_and_its_stop(llm_server, make_consumer):
    consumer = make_consumer(worker_id="c1", interval=30)
    pause("session_summary", reason="later")
    for _ in range(3):
        enqueue(StudyQuestionFactory())
    consumer.run_cycle()
    record = QueueConsumer.objects.get(worker_id="c1")
    assert record.interval_seconds == 30
    assert record.llm_url == llm_server.url
    assert record.paused_kinds == ["session_summary"]
    assert not record.breaker_open and record.stopped_at is None
    (state,) = presence.consumer_states()
    assert state.state is Liveness.LIVE and state.live
    consumer.close()
    record.refresh_from_db()
    assert record.stopped_at is not None
    assert presence.consumer_states()[0].state is Liveness.STOPPED


def test_a_consumer_that_stops_reporting_is_silent_after_two_intervals(make_consumer, settings):
    now = timezone.now()
    QueueConsumer.objects.create(
        worker_id="gone",
        host="h",
        pid=1,
        started_at=now - timedelta(hours=1),
        seen_at=now - timedelta(seconds=121),
        interval_seconds=60,
        llm_url="http://x/v1",
    )
    (state,) = presence.consumer_states(now)
    assert (state.state, state.silent_for) == (Liveness.SILENT, timedelta(seconds=121))
    assert presence.consumer_states(now - timedelta(seconds=2))[0].state is Liveness.LIVE


def test_a_consumer_whose_llm_is_down_records_its_open_breaker(settings, free_port, make_consumer):
    settings.STUDYQUEUE = {"LLM_URL": f"http://user:secret-pw@127.0.0.1:{free_port}/v1"}
    consumer = make_consumer(worker_id="c2")
    enqueue(StudyQuestionFactory())
    consumer.run_cycle()
    record = QueueConsumer.objects.get(worker_id="c2")
    assert record.breaker_open and record.breaker_error == "llm_unavailable"
    assert record.breaker_since is not None
    assert "secret-pw" not in record.llm_url and "[redacted]@" in record.llm_url


def test_states_are_listed_live_then_silent_then_stopped():
    now = timezone.now()
    common = {"host": "h", "pid": 1, "started_at": now, "interval_seconds": 60, "llm_url": "u"}
    QueueConsumer.objects.create(worker_id="a-stopped", seen_at=now, stopped_at=now, **common)
    QueueConsumer.objects.create(worker_id="b-silent", seen_at=now - timedelta(hours=1), **common)
    QueueConsumer.objects.create(worker_id="c-live", seen_at=now, **common)
    states = presence.consumer_states(now)
    assert [(s.record.worker_id, s.state) for s in states] == [
        ("c-live", Liveness.LIVE),
        ("b-silent", Liveness.SILENT),
        ("a-stopped", Liveness.STOPPED),
    ]
    assert [s.record.worker_id for s in presence.live_consumers(now)] == ["c-live"]


def test_paused_kinds_are_a_list_shown_with_all_for_every_kind(make_consumer, llm_server):
    pause("")
    pause("session_summary")
    make_consumer(worker_id="c3").run_cycle()
    record = QueueConsumer.objects.get(worker_id="c3")
    assert sorted(record.paused_kinds) == ["", "session_summary"]
    assert record.paused_display == ", ".join(k or "all" for k in record.paused_kinds)


def test_a_consumer_reports_its_model_prompt_version_and_gate_limit(
    llm_server, make_consumer, settings
):
    from studyqueue.explanations.prompts import current_version

    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_MODEL": "qwen", "GATE_PERMITS": 3}
    make_consumer(worker_id="c4").run_cycle()
    record = QueueConsumer.objects.get(worker_id="c4")
    version = current_version()
    assert (record.model, record.prompt_version, record.prompt_label) == (
        "qwen",
        version.hash,
        version.label,
    )
    assert (record.gate_permits, record.gate_limit) == ("3", 3)


def test_records_silent_or_stopped_for_over_a_day_go_when_a_consumer_starts_or_stops(
    llm_server, make_consumer
):
    now = timezone.now()
    common = {"host": "h", "pid": 1, "interval_seconds": 60, "llm_url": "u"}
    day = presence.KEPT_FOR
    QueueConsumer.objects.create(
        worker_id="old-stopped",
        started_at=now - 2 * day,
        seen_at=now - day * 1.5,
        stopped_at=now - day * 1.5,
        **common,
    )
    QueueConsumer.objects.create(
        worker_id="old-silent", started_at=now - 2 * day, seen_at=now - day * 1.1, **common
    )
    QueueConsumer.objects.create(
        worker_id="recent-stopped", started_at=now, seen_at=now - day / 2, stopped_at=now, **common
    )
    consumer = make_consumer(worker_id="new")
    consumer.run_cycle()
    assert set(QueueConsumer.objects.values_list("worker_id", flat=True)) == {
        "recent-stopped",
        "new",
    }
    QueueConsumer.objects.filter(worker_id="recent-stopped").update(seen_at=now - day * 2)
    consumer.close()  # its stop prunes too
    assert list(QueueConsumer.objects.values_list("worker_id", flat=True)) == ["new"]


def test_a_running_consumer_whose_record_was_removed_writes_it_again(llm_server, make_consumer):
    """Removed while momentarily silent (the admin's action, a hand clean-up): the next
    report writes the whole record again, its start and its jobs completed included."""
    consumer = make_consumer(worker_id="c5", interval=30)
    enqueue(StudyQuestionFactory())
    consumer.run_cycle()
    before = QueueConsumer.objects.get(worker_id="c5")
    QueueConsumer.objects.filter(worker_id="c5").delete()
    enqueue(StudyQuestionFactory())
    consumer.run_cycle()
    after = QueueConsumer.objects.get(worker_id="c5")
    assert (after.host, after.pid, after.started_at) == (
        before.host,
        before.pid,
        before.started_at,
    )
    assert (after.interval_seconds, after.llm_url, after.gate_permits) == (
        30,
        llm_server.url,
        before.gate_permits,
    )
    assert after.stopped_at is None
    assert after.prompt_version == before.prompt_version
    assert presence.consumer_states()[0].state is Liveness.LIVE
    consumer.close()
    after.refresh_from_db()
    assert after.stopped_at is not None
