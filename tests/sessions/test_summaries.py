"""The checks of a summary without an LLM call: the score it states, the questions it says
were missed, and a figure it cannot read left unread (never agreeing)."""

from __future__ import annotations

import pytest

from studyqueue.models import SessionAnswer
from studyqueue.sessions import summaries


def _answers(*correct: bool) -> list[SessionAnswer]:
    return [SessionAnswer(position=n, correct=ok) for n, ok in enumerate(correct, start=1)]


# 10 answers, 7 right: questions 3, 5 and 9 missed.
TEN = _answers(True, True, False, True, False, True, True, True, False, True)
MISSED = "3번, 5번, 9번 문제를 틀렸습니다."


@pytest.mark.parametrize(
    ("text", "stated", "flags"),
    [
        (f"점수: 10문제 중 7문제 (70%)\n{MISSED}", {"right": 7, "total": 10, "percent": 70}, []),
        (f"7/10을 맞혔습니다. {MISSED}", {"right": 7, "total": 10}, []),
        (f"You got 7 out of 10. {MISSED}", {"right": 7, "total": 10}, []),
        (f"정답률 70%. {MISSED}", {"percent": 70}, []),
        (
            f"점수: 10문제 중 8문제 (80%)\n{MISSED}",
            {"right": 8, "total": 10, "percent": 80},
            ["score_mismatch"],
        ),
        (
            f"점수: 7/10 (65%). {MISSED}",
            {"right": 7, "total": 10, "percent": 65},
            ["score_mismatch"],
        ),
        (f"잘했어요. {MISSED}", {}, ["no_score_stated"]),
        # Two different fractions: unread, never agreeing.
        (f"7/10, 아니 8/10. {MISSED}", {}, ["no_score_stated"]),
        (
            "점수: 7/10. 3번과 5번 문제를 틀렸습니다.",
            {"right": 7, "total": 10},
            ["missed_not_mentioned"],
        ),
        (
            f"점수: 7/10. {MISSED} 1번 문제도 틀렸습니다.",
            {"right": 7, "total": 10},
            ["wrong_question"],
        ),
        (f"점수: 7/10. 1번은 맞혔지만 {MISSED}", {"right": 7, "total": 10}, []),
        ("Score: 7/10. Question 3, question 5 and Q9 were missed.", {"right": 7, "total": 10}, []),
    ],
)
def test_what_a_summary_states_is_checked(text, stated, flags):
    checked = summaries.check(text, TEN)
    assert checked.stated == stated
    assert checked.flags == flags


def test_a_date_is_not_a_score():
    checked = summaries.check("2026/12/01 세션: 1번 문제를 틀렸습니다.", _answers(False, True))
    assert checked.flags == ["no_score_stated"]


@pytest.mark.django_db
def test_the_prompt_and_the_checks_score_the_same_answers():
    """A key under review and a question changed since the session get no verdict and are
    left out of the score the prompt gives and the checks use; the session keeps its own."""
    from studyqueue.models import KeyAudit, StudyQuestion, StudySession
    from studyqueue.sessions import recording
    from tests.factories import StudyQuestionFactory

    for n in range(4):
        StudyQuestionFactory(
            external_id=f"q-{n}",
            text=f"Capital {n}?",
            choices=["Seoul", "Paris"],
            answer="1",
            explanation=f"Because {n}: the key is Seoul." if n < 3 else "",
        )
    record = {
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:20:00+09:00",
        "answers": [{"question": f"q-{n}", "chosen": c} for n, c in enumerate((1, 2, 2, 2))],
    }
    session, _ = recording.record(recording.check(record))
    StudyQuestion.objects.filter(external_id="q-2").update(key_audit=KeyAudit.DISPUTED)
    StudyQuestion.objects.filter(external_id="q-3").update(text="Capital of France?")
    answers = summaries.answers_of(session)
    assert [a.position for a in summaries.scored(answers)] == [1, 2]
    assert summaries.needed(answers) == []  # not the changed one, though missed and unexplained
    StudyQuestion.objects.filter(external_id="q-3").update(explanation="Because 3: Paris.")
    answers = summaries.answers_of(session)
    prompt = summaries.messages(session, answers)[1]["content"]
    assert "Score: 1 of 2 right." in prompt
    third, fourth = prompt.split("Question 3:")[1].split("Question 4:")
    assert "under review" in third and "Result:" not in third and "Because 2" not in third
    assert "Changed since the session" in fourth and "Result:" not in fourth
    assert "Capital 3?" in fourth and "Because 3" not in fourth  # as the learner saw it
    assert "Because 1" in prompt  # the missed question that counts keeps its explanation
    fine = "점수: 2문제 중 1문제 (50%)\n2번 문제를 틀렸습니다. 3번은 검토 중이고 4번은 바뀌었어요."
    assert summaries.check(fine, answers) == summaries.Checked(
        {"right": 1, "total": 2, "percent": 50}, []
    )
    assert summaries.check("점수: 4문제 중 2문제. 2번, 3번 문제를 틀렸습니다.", answers).flags == [
        "score_mismatch"
    ]
    assert (StudySession.objects.get(pk=session.pk).right, session.total) == (1, 4)
    assert summaries.as_json(session)["outdated"] is True


@pytest.mark.django_db
def test_a_review_applies_only_to_the_current_summary_as_the_reviewer_saw_it():
    """The admin's decision on a summary, as the domain applies it: a summary replaced or decided
    meanwhile is refused, a bad correction too, and neither writes anything."""
    from studyqueue.exceptions import ReviewConflict
    from studyqueue.models import SessionSummary, StudySession
    from studyqueue.sessions import recording
    from tests.factories import StudyQuestionFactory

    StudyQuestionFactory(external_id="q-1", choices=["Seoul", "Paris"], answer="1")
    record = {
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:20:00+09:00",
        "answers": [{"question": "q-1", "chosen": 2}],
    }
    session, _ = recording.record(recording.check(record))
    old, shown = (SessionSummary.objects.create(session=session, text=t) for t in ("a", "b"))
    summaries.make_current(shown)
    with pytest.raises(ReviewConflict):
        summaries.review(session.pk, old.pk, "approved", by="lee", seen="unreviewed")
    with pytest.raises(ValueError, match="empty"):
        summaries.review(session.pk, shown.pk, "edited", by="lee", seen="unreviewed", text=" ")
    with pytest.raises(ValueError, match="no review decision"):
        summaries.review(session.pk, shown.pk, "pending", by="lee", seen="unreviewed")
    assert not SessionSummary.objects.exclude(review_status="unreviewed").exists()
    summaries.review(
        session.pk, shown.pk, "edited", by="lee", seen="unreviewed", text="1문제 중 0문제."
    )
    edited = StudySession.objects.get(pk=session.pk).summary
    assert (edited.text, edited.author, edited.review_status) == (
        "1문제 중 0문제.",
        "lee",
        "edited",
    )
    assert SessionSummary.objects.get(pk=shown.pk).review_status == "edited"
    with pytest.raises(ReviewConflict):  # the page showed it unreviewed: decided meanwhile
        summaries.review(session.pk, edited.pk, "approved", by="kim", seen="unreviewed")
