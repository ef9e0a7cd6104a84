"""A session's notice (``workers/session_notice.py``) against a real HTTP receiver: a summary
made current while the session's notice is being delivered is delivered after it."""

from __future__ import annotations

import json

import pytest

from studyqueue.models import JobKind, JobStatus, StudySession
from studyqueue.queue.pauses import pause, resume
from studyqueue.sessions import recording, summaries
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _session() -> StudySession:
    StudyQuestionFactory(external_id="q-1", choices=["4", "5"], answer="4", explanation="Four.")
    line = {
        "external_id": "s-1",
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:25:00+09:00",
        "answers": [{"question": "q-1", "chosen": 1}],
    }
    return recording.record(recording.check(line))[0]


def test_a_summary_written_while_the_notice_is_delivered_gets_its_own(receiver, make_consumer):
    """Consumer A (a thread, its own connections) delivers the notice of summary 1 to a
    receiver that holds its answer; summary 2 is written meanwhile (by consumer B, or by A,
    whose cycle has places left beside a notice and may claim it first), and its notice finds
    the first one active. Once the receiver answers, summary 2 is delivered too."""
    session = _session()
    summaries.queue_summaries([session])
    pause(JobKind.SESSION_NOTICE)
    make_consumer(worker_id="writer").run_cycle()  # summary 1, and its notice queued
    resume(JobKind.SESSION_NOTICE)
    first = StudySession.objects.get(pk=session.pk).summary_id
    with receiver.holding(make_consumer(worker_id="deliverer")):
        wait_for(lambda: receiver.posts, timeout=20, what="summary 1's notice POSTed")
        summaries.queue_summaries([session])  # as a reviewer's reject does
        make_consumer(worker_id="rewriter").run_cycle()
        wait_for(
            lambda: StudySession.objects.get(pk=session.pk).summary_id != first,
            timeout=20,
            what="summary 2 current while summary 1's notice is held",
        )
        second = StudySession.objects.get(pk=session.pk).summary_id
        assert len(receiver.posts) == 1  # summary 1's notice is still being delivered
    make_consumer(worker_id="after").run_cycle()
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.posts]
    assert keys == [f"session-{session.pk}-summary-{n}" for n in (first, second)]
    assert json.loads(receiver.posts[-1][1])["written_at"] is not None
    notices = session.jobs.filter(kind=JobKind.SESSION_NOTICE)
    assert list(notices.values_list("status", flat=True)) == [JobStatus.COMPLETED] * 2
