"""Recording a session: every reason a record is refused, scoring against the key, and the
same session sent twice (or with other content under the same id)."""

from __future__ import annotations

import pytest

from studyqueue.models import SessionAnswer, StudySession
from studyqueue.sessions import recording
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def questions():
    return [
        StudyQuestionFactory(
            external_id="geo-1", text="수도는?", choices=["부산", "서울"], answer="서울"
        ),
        StudyQuestionFactory(external_id="geo-2", text="가장 긴 강은?", answer="낙동강"),
        StudyQuestionFactory(external_id="nokey", text="No key", choices=["a", "b"], answer=""),
    ]


def _session(**fields):
    return {
        "external_id": "s-1",
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:25:00+09:00",
        "answers": [
            {"question": "geo-1", "chosen": 1, "seconds": 31},
            {"question": "geo-2", "chosen": "낙동강입니다"},
        ],
        **fields,
    }


def test_a_session_is_scored_against_the_keys_and_recorded_once(questions):
    session = recording.check(_session())
    row, created = recording.record(session)
    assert created and (row.right, row.total) == (1, 2)
    answers = list(SessionAnswer.objects.filter(session=row))
    assert [(a.position, a.chosen, a.correct, a.key, a.seconds) for a in answers] == [
        (1, "1", False, "서울", 31),
        (2, "낙동강입니다", True, "낙동강", None),
    ]
    again, created = recording.record(recording.check(_session()))
    assert (again.pk, created) == (row.pk, False)
    assert StudySession.objects.count() == 1
    with pytest.raises(recording.Conflict):
        recording.record(recording.check(_session(learner="lee-01")))


def test_a_question_by_id_and_a_set(questions):
    from studyqueue.sets import question_sets

    question_sets.add("midterm", [questions[0].pk])
    record = _session(set="midterm", answers=[{"question": {"id": questions[0].pk}, "chosen": 2}])
    row, _ = recording.record(recording.check(record))
    assert row.question_set.name == "midterm" and row.right == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"learner": ""}, "learner is missing"),
        ({"ended_at": "2026-12-01T08:00:00+09:00"}, "ended_at is before started_at"),
        ({"started_at": "yesterday"}, "started_at is not a date and time"),
        ({"colour": "red"}, "unknown fields: colour"),
        ({"answers": []}, "answers must be a list of 1 to 500 answers"),
        ({"set": "nope"}, "no question set named 'nope'"),
        ({"set": "\ud800"}, "no question set named '\\ud800'"),
        ({"\ud800": 1}, "unknown fields: \\ud800"),
        ({"external_id": ".."}, "external_id is part of a URL"),
        ({"external_id": "app/../s-1"}, "external_id is part of a URL"),
        ({"external_id": "/s-1"}, "external_id is part of a URL"),
        ({"started_at": "0001-01-01T00:00:00+09:00"}, "started_at is not a date and time like"),
        ({"ended_at": "9999-12-31T23:00:00-05:00"}, "ended_at is not a date and time like"),
        ({"answers": [{"question": "geo-9", "chosen": 1}]}, 'unknown question "geo-9"'),
        ({"answers": [{"question": "geo-1", "chosen": 3}]}, "a choice number from 1 to 2"),
        ({"answers": [{"question": "geo-1", "chosen": "2"}]}, "a choice number from 1 to 2"),
        ({"answers": [{"question": "geo-2", "chosen": ""}]}, "chosen must be the answer's text"),
        ({"answers": [{"question": "nokey", "chosen": 1}]}, "has no key to score it against"),
        ({"answers": [{"question": "geo-2", "chosen": "\ud800"}]}, "not valid Unicode"),
        ({"answers": [{"question": {"id": [1]}, "chosen": 1}]}, 'unknown question {"id": [1]}'),
        ({"answers": [{"question": {"id": 10**30}, "chosen": 1}]}, "unknown question"),
        ({"answers": [{"question": "\ud800", "chosen": 1}]}, 'unknown question "\\ud800"'),
        ({"answers": [{"question": "geo-2"}]}, "chosen must be the answer's text"),
        ({"answers": [{"chosen": 1}]}, "answer 1: question is missing"),
        ({"answers": [{"question": "geo-1", "chosen": 1, "seconds": -1}]}, "seconds must be"),
        (
            {"answers": [{"question": "geo-1", "chosen": 1}, {"question": "geo-1", "chosen": 2}]},
            "answer 2: question geo-1 is answered twice",
        ),
    ],
)
def test_each_bad_record_says_why_and_records_nothing(questions, change, reason):
    with pytest.raises(recording.Invalid) as caught:
        recording.check(_session(**change))
    assert any(reason in text for text in caught.value.reasons), caught.value.reasons
    assert "\n".join(caught.value.reasons).encode()  # no lone surrogate: each can be sent
    assert StudySession.objects.count() == 0


def test_an_answer_given_twice_is_named_with_its_other_reasons(questions):
    twice = [{"question": "geo-1", "chosen": 9}, {"question": "geo-1", "chosen": 9}]
    with pytest.raises(recording.Invalid) as caught:
        recording.check(_session(answers=twice))
    assert caught.value.reasons == [
        "answer 1: chosen must be a choice number from 1 to 2",
        "answer 2: chosen must be a choice number from 1 to 2",
        "answer 2: question geo-1 is answered twice",
    ]


def test_every_reason_at_once_and_not_an_object(questions):
    with pytest.raises(recording.Invalid) as caught:
        recording.check(_session(learner=None, ended_at=None, answers="x"))
    assert len(caught.value.reasons) == 3
    with pytest.raises(recording.Invalid):
        recording.check(["not", "an", "object"])


def test_a_resend_is_known_after_its_questions_were_deleted_or_changed(questions):
    """A re-import or an app's retry is the recorded session again, though a question it
    names is gone (an unknown reference where a deleted question was) or no longer checks."""
    row, _ = recording.record(recording.check(_session()))
    questions[1].delete()
    questions[0].choices = ["부산"]  # choice 1 still, but the key no longer names it
    questions[0].save()
    again = recording.check(_session())
    assert recording.record(again) == (row, False)
    assert StudySession.objects.count() == 1
    for other in (
        {"learner": "lee-01"},
        {"answers": [{"question": "geo-1", "chosen": 1, "seconds": 31}]},
        {"answers": [{"question": "geo-1", "chosen": 1, "seconds": 31}, {"question": "x"}]},
        {"external_id": "s-2"},
    ):
        with pytest.raises(recording.Invalid):  # not the recorded session: its reasons
            recording.check(_session(**other))
