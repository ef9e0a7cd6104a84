"""A consumer with several LLM servers (``LLM_URL`` with commas): one consumer keeps every
server busy, each revision and attempt names the server that wrote it, a server killed in
the middle of a drain fails no job and burns no attempt, it rejoins once it answers, and
consumers sharing the servers never exceed any server's limit (the gates' row leases, on
either database). The servers are real test servers on 127.0.0.1."""

from __future__ import annotations

import random
import threading

import pytest

from studyqueue.consumer.consumer import Consumer
from studyqueue.models import ExplanationRevision, JobAttempt, JobStatus, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from studyqueue.services import pool
from studyqueue.services.endpoints import endpoint_name
from studyqueue.services.pool import State
from tests.factories import StudyQuestionFactory
from tests.helpers import ports, wait_for
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def servers(settings):
    """Two test servers, both named by ``LLM_URL``; checks off, so every job is one call."""
    # Below the ephemeral range: a server stopped in a test may be started again on its port.
    pair = [LLMServer(port=ports.free_port()).start(), LLMServer(port=ports.free_port()).start()]
    settings.STUDYQUEUE = {
        "LLM_URL": ",".join(server.url for server in pair),
        "LLM_TIMEOUT_SECONDS": 5,
        "LLM_CONNECT_TIMEOUT_SECONDS": 1,
        "BREAKER_BASE_SECONDS": 0.2,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    yield pair
    for server in pair:
        server.stop()


def _enqueue(n: int) -> list[int]:
    return [enqueue(StudyQuestionFactory(text=f"What is {i} + {i}?")).job.pk for i in range(n)]


def _overlap(a: LLMServer, b: LLMServer) -> bool:
    """Whether a reply of ``a`` was generated while one of ``b`` was."""
    return any(s1 < e2 and s2 < e1 for s1, e1 in a.timeline for s2, e2 in b.timeline)


def test_one_consumer_keeps_both_servers_busy_and_records_who_wrote_what(servers, make_consumer):
    a, b = servers
    for server in servers:
        server.configure(delay=0.15)
    ids = _enqueue(8)
    consumer: Consumer = make_consumer()
    assert len(consumer.pool.members) == 2 and consumer.pool.limit == 2
    assert consumer.run_cycle().outcomes == {"completed": 8}
    assert a.stats()["requests"] >= 2 and b.stats()["requests"] >= 2
    assert a.stats()["requests"] + b.stats()["requests"] == 8
    assert a.stats()["max_active"] == b.stats()["max_active"] == 1  # one permit each
    assert _overlap(a, b), "the two servers never worked at the same time"
    names = {endpoint_name(a.url), endpoint_name(b.url)}
    written = ExplanationRevision.objects.filter(job_id__in=ids)
    assert set(written.values_list("endpoint", flat=True)) == names
    assert all(written.values_list("model", flat=True))  # the model beside the server
    attempts = JobAttempt.objects.filter(job_id__in=ids)
    assert set(attempts.values_list("endpoint", flat=True)) == names
    # What the consumer reports of each: the dashboard's rows.
    consumer.run_cycle()
    reported = consumer.pool.report()
    assert [(r["name"], r["state"], r["limit"]) for r in reported] == [
        (endpoint_name(a.url), "up", 1),
        (endpoint_name(b.url), "up", 1),
    ]
    assert all(r["tokens_per_second"] for r in reported)


def test_a_server_killed_mid_drain_fails_no_job_and_burns_no_attempt(servers, make_consumer):
    a, b = servers
    for server in servers:
        server.configure(delay=0.1)
    ids = _enqueue(10)
    consumer: Consumer = make_consumer()
    stopper = a.stop_once_active()
    result = consumer.run_cycle()
    stopper.join(timeout=5)
    assert result.outcomes == {"completed": 10}, result.summary()
    jobs = StudyQuestionJob.objects.filter(pk__in=ids)
    assert set(jobs.values_list("status", flat=True)) == {JobStatus.COMPLETED}
    assert set(jobs.values_list("attempts", flat=True)) == {1}
    first, second = consumer.pool.members
    assert first.breaker.failures >= 1 and second.breaker.failures == 0
    assert consumer.pool.allows(), "one server down must not pause the queue"
    assert b.stats()["requests"] >= 9


def test_a_server_that_comes_back_is_probed_and_rejoins(servers, make_consumer):
    a, b = servers
    port = a.port
    a.stop()
    _enqueue(2)
    consumer: Consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 2}
    first = consumer.pool.members[0]
    assert first.breaker.failures == 1 and b.stats()["requests"] == 2
    back = LLMServer(port=port).start()
    try:
        wait_for(lambda: first.state == State.PROBING, timeout=5, what="the pause to end")
        _enqueue(6)
        assert consumer.run_cycle().outcomes == {"completed": 6}
        assert back.stats()["requests"] >= 1, "the server that came back got no call"
        assert first.state == State.UP and first.breaker.failures == 0
    finally:
        back.stop()


def test_every_server_down_pauses_claiming_and_hands_jobs_back_unharmed(
    servers, settings, make_consumer
):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 30}
    for server in servers:
        server.stop()
    (job_id,) = _enqueue(1)
    consumer: Consumer = make_consumer()
    result = consumer.run_cycle()
    assert result.outcomes == {"released": 1}
    assert not consumer.pool.allows() and result.paused_for > 0
    job = StudyQuestionJob.objects.get(pk=job_id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_consumers_sharing_the_servers_never_exceed_any_servers_limit(
    servers, settings, make_consumer, seed
):
    """Three consumers (threads, each with its own connections) drain one queue through two
    servers with limits 2 and 1; each reply takes a random time, so claims, hand-overs and
    lease takes interleave differently per seed. No server ever serves above its limit."""
    rng = random.Random(seed)
    a, b = servers
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "LLM_ENDPOINTS": [
            {"url": a.url, "gate_permits": 2},
            {"url": b.url, "gate_permits": 1},
        ],
    }
    a.configure(delay=rng.uniform(0.01, 0.08), word_delay=rng.uniform(0, 0.01))
    b.configure(delay=rng.uniform(0.01, 0.08), word_delay=rng.uniform(0, 0.01))
    ids = _enqueue(24)
    consumers = [make_consumer(worker_id=f"c{i}", budget=30) for i in range(3)]
    threads = [threading.Thread(target=c.run_cycle) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    done = StudyQuestionJob.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count()
    assert done == 24
    assert a.stats()["max_active"] <= 2 and b.stats()["max_active"] <= 1
    assert a.stats()["requests"] > 0 and b.stats()["requests"] > 0


@pytest.mark.parametrize("fault", ["null", "reasoning"])
def test_a_server_that_answers_empty_loses_the_choice_and_costs_no_attempt(
    servers, settings, make_consumer, fault
):
    """A server that answers 200 with no text (content null; a reasoning server's text all
    in ``reasoning_content``) fails over to the healthy one within the attempt, and its
    empty replies in a row open its breaker: every job completes, each on its first attempt."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BREAKER_BASE_SECONDS": 30}
    a, b = servers
    a.configure(fault=fault)  # fast and empty: the choice favours it until its breaker opens
    b.configure(delay=0.05)
    ids = _enqueue(8)
    consumer: Consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 8}
    jobs = StudyQuestionJob.objects.filter(pk__in=ids)
    assert set(jobs.values_list("status", flat=True)) == {JobStatus.COMPLETED}
    assert set(jobs.values_list("attempts", flat=True)) == {1}
    assert b.stats()["requests"] == 8
    assert 1 <= a.stats()["requests"] <= pool.EMPTY_REPLIES_TO_PAUSE
    empty, healthy = consumer.pool.members
    assert empty.state == State.DOWN and healthy.state == State.UP
    assert empty.report()["error"] == "llm_empty"
    written = ExplanationRevision.objects.filter(job_id__in=ids)
    assert set(written.values_list("endpoint", flat=True)) == {endpoint_name(b.url)}
    assert consumer.pool.allows(), "one server answering empty must not pause the queue"
