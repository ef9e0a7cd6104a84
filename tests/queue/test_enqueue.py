"""Enqueue's turns: a batch queued later takes turns with the jobs queued before it."""

from __future__ import annotations

import pytest

from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue, enqueue_many, next_turn
from studyqueue.queue.transitions import Outcome
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db


def _work(jobs: int) -> list[int]:
    """One consumer's next ``jobs`` jobs, one claim at a time: their questions, in order."""
    done = []
    for _ in range(jobs):
        (job,) = transitions.claim(worker_id="w", limit=1)
        assert transitions.complete(job) == Outcome.COMPLETED
        done.append(job.study_question_id)
    return done


def test_a_small_set_queued_after_a_big_one_takes_turns_with_it():
    big = [StudyQuestionFactory().pk for _ in range(40)]
    small = [StudyQuestionFactory().pk for _ in range(4)]
    assert next_turn() == 0
    assert enqueue_many(big) == 40
    assert _work(10) == big[:10]
    assert next_turn() == 11  # the big set's eleventh job is next
    assert enqueue_many(small) == 4
    order = ["small" if question in small else "big" for question in _work(9)]
    # Not after the big set's 30 other jobs: one of each in turn, the big one first on a tie.
    assert order == ["big", "big", "small", "big", "small", "big", "small", "big", "small"]


def test_a_job_queued_alone_takes_the_current_turn():
    enqueue_many([StudyQuestionFactory().pk for _ in range(5)])
    _work(2)
    single = enqueue(StudyQuestionFactory()).job
    assert single.turn == next_turn() == 3
    assert _work(2)[1] == single.study_question_id
