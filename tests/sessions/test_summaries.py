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
        (f"7/10 (65%). {MISSED}", {"right": 7, "total": 10, "percent": 65}, ["score_mismatch"]),
        (f"잘했어요. {MISSED}", {}, ["no_score_stated"]),
        # Two different fractions: unread, never agreeing.
        (f"7/10, 아니 8/10. {MISSED}", {}, ["no_score_stated"]),
        ("7/10. 3번과 5번 문제를 틀렸습니다.", {"right": 7, "total": 10}, ["missed_not_mentioned"]),
        (f"7/10. {MISSED} 1번 문제도 틀렸습니다.", {"right": 7, "total": 10}, ["wrong_question"]),
        (f"7/10. 1번은 맞혔지만 {MISSED}", {"right": 7, "total": 10}, []),
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
