"""The circuit breaker: failures that arrive together are one failure."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from studyqueue.models import ErrorCode
from studyqueue.queue import transitions as queue
from studyqueue.services.breaker import CircuitBreaker
from studyqueue.services.llm import LLMError
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for


def _down(started: float | None) -> LLMError:
    return LLMError(ErrorCode.LLM_UNAVAILABLE, "down", call_started=started)


def test_calls_running_at_an_opening_count_once_and_later_calls_count_again(settings):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    before = time.monotonic()
    first = breaker.trip(_down(before))
    for _ in range(7):  # the other calls in flight when the server went away
        assert breaker.trip(_down(before)) <= first
    assert breaker.failures == 1
    assert breaker.trip(_down(time.monotonic())) > first  # started after it opened: a new trip
    assert breaker.failures == 2
    assert breaker.trip(_down(None)) and breaker.failures == 3  # no start known: counted
    breaker.success()
    assert breaker.trip(_down(before)) and breaker.failures == 1  # a new run of failures


@pytest.mark.django_db(transaction=True)
def test_a_server_restart_under_eight_calls_is_one_failure_and_one_warning(
    llm_server, make_consumer, settings, caplog
):
    """Eight calls in flight when the model server goes away fail together: the breaker
    opens once, with the first pause (not 2 -> 4 -> ... -> 60 s), and says so once."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 8,
        "BATCH_SIZE": 8,
        "BREAKER_BASE_SECONDS": 2,
        "BREAKER_MAX_SECONDS": 60,
        "LLM_TIMEOUT_SECONDS": 120,
    }
    # Long generations: each streams a word a second (the first word lets the gate's
    # warm-first send the others).
    llm_server.configure(word_delay=1.0, answer=" ".join(["word"] * 120))
    for _ in range(8):
        queue.enqueue(StudyQuestionFactory())
    consumer = make_consumer(worker_id="restart")
    cycle = threading.Thread(target=consumer.run_cycle)
    with caplog.at_level(logging.INFO, logger="studyqueue"):
        cycle.start()
        wait_for(lambda: llm_server.stats()["active"] == 8, timeout=30, what="8 calls in flight")
        llm_server.stop()  # the restart: every connection dropped at once
        cycle.join(timeout=60)
        assert not cycle.is_alive()
    breaker = consumer.breaker
    assert breaker.failures == 1
    assert 0 < breaker.remaining() <= 2
    paused = [r for r in caplog.records if r.getMessage().startswith("study_llm_paused ")]
    assert len(paused) == 1, [r.getMessage() for r in paused]
    assert "failures=1 pause_s=2.0" in paused[0].getMessage()
    assert not queue.StudyQuestionJob.objects.exclude(status="pending").exists()


def test_the_server_coming_back_is_good_news_logged_at_info(settings, caplog):
    settings.STUDYQUEUE = {"BREAKER_BASE_SECONDS": 2, "BREAKER_MAX_SECONDS": 60}
    breaker = CircuitBreaker()
    breaker.trip(_down(None))
    with caplog.at_level(logging.DEBUG, logger="studyqueue"):
        breaker.success()
    (resumed,) = [r for r in caplog.records if r.getMessage().startswith("study_llm_resumed ")]
    assert resumed.levelno == logging.INFO
