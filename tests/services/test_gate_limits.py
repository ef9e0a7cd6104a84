"""GATE_PERMITS=auto end to end: consumers against the real test LLM server, the limit
found, halved, shared through the database and kept across a restart."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from studyqueue.models import GateLimit
from studyqueue.queue.enqueue import enqueue as enqueue_job
from studyqueue.services import gate_control, gate_limits
from studyqueue.services import pool as pool_module
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auto(llm_server, settings):
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": "auto",
        "GATE_MAX_PERMITS": 8,
        "BATCH_SIZE": 1,
        "CYCLE_BUDGET_SECONDS": 120,
    }
    return llm_server


def enqueue(n: int) -> None:
    for _ in range(n):
        enqueue_job(StudyQuestionFactory())


def stored() -> GateLimit:
    return GateLimit.objects.get()


def test_the_limit_rises_when_the_server_batches(auto, make_consumer, caplog):
    # Four replies at once, each 0.1 s: tokens/s grows up to four calls, then stops.
    auto.configure(delay=0.1, capacity=4)
    # Enough calls for a full window at limit 1 and at limit 2 even when the calls' times
    # spread (a loaded machine): each window then grows to MAX_WINDOW_CALLS.
    jobs = 3 * gate_control.MAX_WINDOW_CALLS
    enqueue(jobs)
    consumer = make_consumer()
    with caplog.at_level(logging.INFO, logger="studyqueue.gate"):
        assert consumer.run_cycle().outcomes == {"completed": jobs}
    climbs = [r.getMessage() for r in caplog.records if "reason=climb" in r.getMessage()]
    assert climbs, "the limit never rose"
    assert "study_gate_limit endpoint=" in climbs[0] and "old=1 new=2" in climbs[0]
    row = stored()
    assert row.endpoint == consumer.pool.members[0].gate.endpoint
    # Stored: the raised limit and what was measured on the way (a loaded machine may end
    # the cycle before the window at the new limit is full: at least the first one).
    assert row.limit >= 2 and len(row.measured()) >= 1
    assert auto.stats()["max_active"] <= 8  # never beyond GATE_MAX_PERMITS


def test_a_503_halves_the_stored_limit(auto, make_consumer, caplog):
    GateLimit.objects.create(endpoint=auto.url, limit=4, rates={"4": 120.0})
    auto.configure(fault="503")
    enqueue(1)
    consumer = make_consumer()
    with caplog.at_level(logging.INFO, logger="studyqueue.gate"):
        consumer.run_cycle()
    assert (
        consumer.pool.members[0].gate.limit == 2
        and stored().limit == 2
        and stored().reason == "loss"
    )
    assert any(
        "old=4 new=2 reason=loss tokens_per_s=120.0 error_code=llm_overloaded" in r.getMessage()
        for r in caplog.records
    )


def test_a_restarted_consumer_starts_from_the_stored_limit(auto, make_consumer):
    GateLimit.objects.create(endpoint=auto.url, limit=3, rates={"3": 90.0})
    auto.configure(delay=0.2)
    enqueue(6)
    consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 6}
    assert consumer.pool.members[0].gate.limit == 3
    assert auto.stats()["max_active"] == 3  # from the first calls on, not from one


def test_two_consumers_share_one_limit(auto, make_consumer, monkeypatch):
    monkeypatch.setattr(pool_module, "GATE_SYNC_SECONDS", 0.0)
    GateLimit.objects.create(endpoint=auto.url, limit=4)
    first, second = make_consumer(worker_id="a"), make_consumer(worker_id="b")
    first.run_cycle()
    second.run_cycle()
    assert first.pool.members[0].gate.limit == second.pool.members[0].gate.limit == 4
    auto.configure(fault="503")  # the first one sees the server overloaded
    enqueue(1)
    first.run_cycle()
    assert first.pool.members[0].gate.limit == 2 and stored().limit == 2
    auto.configure(fault="")
    second.run_cycle()
    assert second.pool.members[0].gate.limit == 2  # adopted from the database


def test_a_move_decided_at_a_limit_that_no_longer_holds_is_void(db):
    assert gate_limits.sync("http://x/v1", limit=2, rates={2: 50.0}) == 2
    # Another consumer moved it to 1 meanwhile: this one's climb from 2 is refused,
    # its measures are kept.
    GateLimit.objects.update(limit=1)
    assert gate_limits.sync("http://x/v1", limit=4, rates={4: 99.0}, changed_from=2) == 1
    assert stored().measured() == [(2, 50.0), (4, 99.0)]
    assert gate_limits.sync("http://x/v1", limit=2, rates={}, changed_from=1, reason="climb") == 2
    assert (stored().limit, stored().reason) == (2, "climb")


def test_a_fixed_gate_stores_nothing(llm_server, make_consumer, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 2}
    enqueue(2)
    consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 2}
    assert (
        consumer.pool.members[0].gate.controller is None
        and consumer.pool.members[0].gate.limit == 2
    )
    assert not GateLimit.objects.exists()


@pytest.mark.parametrize("rates", [[1, 2], "80.5", 4, {"4": 10**400, "2": "x"}])
def test_stored_rates_that_are_not_an_object_are_unknown(auto, make_consumer, rates):
    # A hand edit or a bad restore: the consumer starts, and its measures replace them.
    GateLimit.objects.create(endpoint=auto.url, limit=3)
    GateLimit.objects.update(rates=rates)
    assert stored().measured() == []
    enqueue(2)
    consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 2}
    assert consumer.pool.members[0].gate.limit == 3
    assert isinstance(stored().rates, dict)
    assert gate_limits.sync(auto.url, limit=3, rates={3: 60.0}) == 3
    assert (3, 60.0) in stored().measured()


def _other_spelling(url: str) -> str:
    """The same server's URL as another consumer may write it."""
    return url.replace("127.0.0.1", "LocalHost").replace("http://", "http://user:s3cret@") + "/"


def test_every_spelling_of_the_url_shares_one_stored_limit(auto, make_consumer, settings, caplog):
    GateLimit.objects.create(endpoint=auto.url, limit=3, rates={"3": 90.0})
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": _other_spelling(auto.url)}
    enqueue(2)
    consumer = make_consumer()
    with caplog.at_level(logging.INFO):
        assert consumer.run_cycle().outcomes == {"completed": 2}
    assert consumer.pool.members[0].gate.endpoint == auto.url
    assert consumer.pool.members[0].gate.limit == 3  # restored from the row of the other spelling
    assert [row.endpoint for row in GateLimit.objects.all()] == [auto.url]
    assert "s3cret" not in caplog.text


@pytest.mark.postgres
def test_two_spellings_of_the_url_make_one_call_at_a_time(llm_server, make_consumer, settings):
    """Two consumers (each with its own gate connection), one LLM_URL with a trailing slash
    and ``localhost``: GATE_PERMITS=1 lets one call through at a time, both together."""
    llm_server.configure(delay=0.15)
    base = {**settings.STUDYQUEUE, "GATE_PERMITS": 1, "BATCH_SIZE": 1, "CYCLE_BUDGET_SECONDS": 60}
    settings.STUDYQUEUE = base
    first = make_consumer(worker_id="a")
    settings.STUDYQUEUE = {**base, "LLM_URL": _other_spelling(llm_server.url)}
    second = make_consumer(worker_id="b")
    enqueue(8)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: c.run_cycle(), [first, second]))
    assert sum(r.outcomes["completed"] for r in results) == 8
    assert all(r.claimed for r in results)  # both took part
    assert llm_server.stats()["max_active"] == 1


def test_0018_names_stored_limits_by_the_normalised_url(transactional_db):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    def migrate(target):  # type: ignore[no-untyped-def]
        executor = MigrationExecutor(connection)
        executor.migrate(target)
        executor.loader.build_graph()
        return executor.loader.project_state(target).apps

    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    apps = migrate([("studyqueue", "0001_squashed_0017_job_attempts")])
    try:
        old = apps.get_model("studyqueue", "GateLimit")
        old.objects.create(endpoint="http://[redacted]@LOCALHOST:8080/v1/", limit=2,
                           rates={"1": 10.0, "2": 19.0}, reason="climb")  # fmt: skip
        old.objects.create(
            endpoint="http://127.0.0.1:8080/v1", limit=4, rates={"2": 20.0, "4": 35.0}
        )
        old.objects.create(endpoint="https://other:443/v1/", limit=1, rates=["garbage"])
    finally:
        migrate(leaves)
    rows = {row.endpoint: row for row in GateLimit.objects.all()}
    assert sorted(rows) == ["http://127.0.0.1:8080/v1", "https://other/v1"]
    merged = rows["http://127.0.0.1:8080/v1"]
    assert merged.limit == 4  # the one changed last
    assert merged.measured() == [(1, 10.0), (2, 20.0), (4, 35.0)]


def test_a_consumer_with_a_lower_maximum_bounds_its_own_calls_only(auto, make_consumer, settings):
    """GATE_MAX_PERMITS=2 next to a consumer with 8: the small one calls two at a time and
    leaves the shared limit of 8 where it was; the other uses all 8."""
    GateLimit.objects.create(endpoint=auto.url, limit=8, rates={"8": 160.0})
    auto.configure(delay=0.05, capacity=8)
    base = settings.STUDYQUEUE
    settings.STUDYQUEUE = {**base, "GATE_MAX_PERMITS": 2}
    small = make_consumer(worker_id="small")
    enqueue(40)  # enough for full windows at its maximum
    assert small.run_cycle().outcomes == {"completed": 40}
    assert (small.pool.members[0].gate.limit, small.pool.members[0].gate.shared_limit) == (2, 8)
    assert auto.stats()["max_active"] == 2
    assert (stored().limit, stored().measured()) == (8, [(8, 160.0)])
    settings.STUDYQUEUE = {**base, "GATE_MAX_PERMITS": 8}
    large = make_consumer(worker_id="large")
    auto.reset_stats()
    enqueue(16)
    assert large.run_cycle().outcomes == {"completed": 16}
    assert large.pool.members[0].gate.limit == 8
    assert auto.stats()["max_active"] > 2  # more than the small one's maximum
