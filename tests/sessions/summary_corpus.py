"""Session summaries as models write them, each sentence labelled by hand with what it states:
its score figures as right answers (``{"right": 7, "total": 10}``, ``{"percent": 70}``; a count
of wrong answers already turned into right ones of the session's 10), the questions it names
and those it says were missed. ``unreadable`` marks a text with a figure whose meaning the
words do not give (a fraction in an explanation, a date, a bare "10문제 중 7문제"): it must
stay unread. Every summary is of ``SESSION``: 10 questions, 7 right, 3, 5 and 9 missed.

Written apart from the reader, from the forms models use: the score line the prompt asks for,
counts of wrong answers, rates, lists and ranges of question numbers, choices named by number,
"N번" meaning times; in Korean and English. Read by ``tests/sessions/test_reading.py`` and
``bench/summary_reader.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

RIGHT, TOTAL = 7, 10
MISSED = frozenset({3, 5, 9})


@dataclass(frozen=True)
class Case:
    text: str
    scores: tuple[dict[str, float], ...] = ()
    named: frozenset[int] = field(default_factory=frozenset)
    missed: frozenset[int] = field(default_factory=frozenset)
    unreadable: bool = False

    @property
    def false_score(self) -> bool:
        """One of its score figures is not the session's."""
        return any(not true(score) for score in self.scores)


def true(score: dict[str, float]) -> bool:
    """The figure agrees with the session (a percentage within one point)."""
    return (
        score.get("right", RIGHT) == RIGHT
        and score.get("total", TOTAL) == TOTAL
        and abs(score.get("percent", 70) - 70) <= 1
    )


def case(
    text: str,
    *scores: dict[str, float],
    named: tuple[int, ...] = (),
    missed: tuple[int, ...] = (),
    unreadable: bool = False,
) -> Case:
    return Case(text, scores, frozenset(named), frozenset(missed), unreadable)


def of(right: float, total: float, percent: float | None = None) -> dict[str, float]:
    score = {"right": right, "total": total}
    return score if percent is None else {**score, "percent": percent}


SESSION = (RIGHT, TOTAL, MISSED)
M = (3, 5, 9)

CORPUS: list[Case] = [
    # The score line the prompt asks for, and the missed questions after it.
    case(
        "점수: 10문제 중 7문제 (70%)\n3번, 5번, 9번 문제를 틀렸습니다.",
        of(7, 10, 70),
        named=M,
        missed=M,
    ),
    case(
        "점수: 10문제 중 8문제 (80%)\n3번, 5번 문제를 틀렸습니다.",
        of(8, 10, 80),
        named=(3, 5),
        missed=(3, 5),
    ),
    case(
        "Score: 7/10 (70%).\nQuestion 3, Question 5 and Question 9 were missed.",
        of(7, 10, 70),
        named=M,
        missed=M,
    ),
    case("Score: 9/10 (90%).\nYou missed Question 3.", of(9, 10, 90), named=(3,), missed=(3,)),
    case("점수: 7/10 (70%)\n3번 문제: 2번을 골랐지만 정답은 4번입니다.", of(7, 10, 70), named=(3,)),
    # The probe: counts and rates of wrong answers are not scores of right ones.
    case("10문제 중 3문제를 틀렸습니다.", of(7, 10)),
    case("10문제 중 7문제를 틀렸습니다.", of(3, 10)),
    case("You missed 3 of 10.", of(7, 10)),
    case("You missed 7 of 10 questions.", of(3, 10)),
    case("오답률 30%로 3번, 5번, 9번 문제를 다시 보세요.", {"percent": 70}, named=M, missed=M),
    case("오답률은 70%입니다.", {"percent": 30}),
    case("You got 3 wrong: Questions 3, 5 and 9.", {"right": 7}, named=M, missed=M),
    case("You got 7 wrong.", {"right": 3}),
    case("세 문제를 틀렸고 일곱 문제를 맞혔어요.", {"right": 7}, {"right": 7}),
    case("두 문제를 틀렸어요.", {"right": 8}),
    # A fraction that is no score does not cancel one that is.
    case(
        "점수: 10문제 중 6문제 (60%)\n3번 문제에서 1/2는 0.5입니다.",
        of(6, 10, 60),
        named=(3,),
        unreadable=True,
    ),
    case("점수: 10문제 중 6문제. 12/1에 다시 풀어 보세요.", of(6, 10), unreadable=True),
    case(
        "점수: 10문제 중 7문제. 5번 문제에서 1/2는 0.5로 바꿔야 합니다.",
        of(7, 10),
        named=(5,),
        unreadable=True,
    ),
    case("Score: 6/10. In Question 5, 1/2 is 0.5.", of(6, 10), named=(5,), unreadable=True),
    case("12/1에 푼 세션입니다. 10문제 중 7문제를 맞혔습니다.", of(7, 10), unreadable=True),
    # N번 as times, not questions.
    case("10번 반복해서 풀어 보세요.", unreadable=True),
    case("2번 연속 틀린 개념이 있습니다.", unreadable=True),
    case(
        "같은 실수를 3번 반복했어요. 3번 문제를 틀렸습니다.",
        named=(3,),
        missed=(3,),
        unreadable=True,
    ),
    case("이 개념은 2번 더 복습하세요.", unreadable=True),
    case("두 번째로 많이 틀린 유형은 계산입니다.", unreadable=True),
    case("Review this 10 times.", unreadable=True),
    # Clauses joined by -고, -지만, -으나, 반면, but.
    case("1번은 맞혔고 3번은 틀렸습니다.", named=(1, 3), missed=(3,)),
    case("1번은 맞혔지만 3번은 틀렸습니다.", named=(1, 3), missed=(3,)),
    case("2번 문제는 맞혔으나 5번 문제는 틀렸어요.", named=(2, 5), missed=(5,)),
    case("4번 문제는 맞힌 반면 9번 문제는 놓쳤습니다.", named=(4, 9), missed=(9,)),
    case("You got Question 1 right but missed Question 3.", named=(1, 3), missed=(3,)),
    case("1번 문제는 정답이었고, 3번 문제는 오답이었습니다.", named=(1, 3), missed=(3,)),
    # Lists and ranges.
    case("Questions 8, 9 and 10 were wrong.", named=(8, 9, 10), missed=(8, 9, 10)),
    case("8~10번 문제를 틀렸습니다.", named=(8, 9, 10), missed=(8, 9, 10)),
    case("8-10번을 다시 풀어 보세요.", named=(8, 9, 10)),
    case("questions 8 to 10 need review.", named=(8, 9, 10)),
    case("8번부터 10번까지 다시 보세요.", named=(8, 9, 10)),
    case("3, 5, 9번 문제를 틀렸습니다.", named=M, missed=M),
    case("3번과 5번, 9번을 틀렸어요.", named=M, missed=M),
    case("3번·5번·9번 문제를 놓쳤습니다.", named=M, missed=M),
    case("Q3, Q5 and Q9 were incorrect.", named=M, missed=M),
    case("You missed #3 and #5.", named=(3, 5), missed=(3, 5)),
    case("문제 3과 문제 5를 틀렸습니다.", named=(3, 5), missed=(3, 5)),
    case("문항 9는 오답입니다.", named=(9,), missed=(9,)),
    # Scores stated the ways models state them.
    case("10문제 중 7문제를 맞혔습니다.", of(7, 10)),
    case("10문제 중 8문제를 맞혔습니다.", of(8, 10)),
    case("7/10을 맞혔습니다.", of(7, 10)),
    case("7 out of 10 correct.", of(7, 10)),
    case("You got 7 out of 10.", of(7, 10)),
    case("You got 8 out of 10.", of(8, 10)),
    case("You answered 7 of 10 questions correctly.", of(7, 10)),
    case("정답률 70%.", {"percent": 70}),
    case("정답률은 80%입니다.", {"percent": 80}),
    case("70% correct.", {"percent": 70}),
    case("You scored 70%.", {"percent": 70}),
    case("Your score was 6/10.", of(6, 10)),
    case("일곱 문제를 맞혔다.", {"right": 7}),
    case("열 문제 중 일곱 문제를 맞혔습니다.", of(7, 10)),
    case("열 문제 중 여덟 문제를 맞혔습니다.", of(8, 10)),
    case("맞힌 문제는 7개입니다.", {"right": 7}),
    case("틀린 문제는 세 개입니다: 3번, 5번, 9번.", {"right": 7}, named=M, missed=M),
    case("정답 7개, 오답 3개.", {"right": 7}, {"right": 7}),
    case("3문제를 맞히지 못했습니다.", {"right": 7}),
    case("7문제를 맞혔어요 (70%).", {"right": 7}, {"percent": 70}),
    case("총 10문제 중 3문제를 틀려 정답률은 70%입니다.", of(7, 10), {"percent": 70}),
    case("정답률 66.7%입니다.", {"percent": 66.7}),
    case("You got 7 of 10 questions right, missing 3.", of(7, 10), {"right": 7}),
    case("You answered 7 questions correctly and missed 3.", {"right": 7}, {"right": 7}),
    case("3 were not correct.", {"right": 7}),
    case("점수: 10문제 중 7문제. 오답률 30%.", of(7, 10), {"percent": 70}),
    case("점수: 7/10, 아니 8/10.", of(7, 10), unreadable=True),
    # Figures with no word that says what they count: unread, never agreeing.
    case("10문제 중 7문제.", unreadable=True),
    case("10문제 중 3문제.", unreadable=True),
    case("7/10.", unreadable=True),
    case("3/10, 잘했어요.", unreadable=True),
    case("70%입니다.", unreadable=True),
    case("30% 남았습니다.", unreadable=True),
    case("1/2는 0.5입니다.", unreadable=True),
    case("2026/12/01 세션입니다.", unreadable=True),
    case(
        "할인율 20%를 잘못 적용해 3번 문제를 틀렸습니다.", named=(3,), missed=(3,), unreadable=True
    ),
    case(
        "3번 문제는 1/2를 0.5로 잘못 계산해 틀렸습니다.", named=(3,), missed=(3,), unreadable=True
    ),
    case("In Question 3, 1/4 of 20 is 5, not 4.", named=(3,), unreadable=True),
    case("It took 25 minutes.", unreadable=True),
    # Questions named and missed in the sentences around the score.
    case("3번 문제는 틀리지 않았습니다.", named=(3,)),
    case("3번 문제를 못 맞혔어요.", named=(3,), missed=(3,)),
    case("잘했어요! 1번 문제도 2번 문제도 맞혔어요.", named=(1, 2)),
    case("3번 문제에서 2번을 골랐지만 정답은 4번입니다.", named=(3,)),
    case("Question 3: you chose 2, but the answer is 4.", named=(3,)),
    case("5번 문제는 개념을 헷갈려 틀렸습니다.", named=(5,), missed=(5,)),
    case("9번 문제를 놓쳤습니다. 다시 복습하세요.", named=(9,), missed=(9,)),
    case("다음에는 틀린 문제의 개념을 복습하세요."),
    case("Next, review the concepts behind Questions 3 and 5.", named=(3, 5)),
    case("3번 문제의 정답은 2번이고, 5번은 맞혔어요.", named=(3, 5)),
    case("You missed Question 3 because you confused the terms.", named=(3,), missed=(3,)),
    case("Q9 was wrong; Q1 was right.", named=(9, 1), missed=(9,)),
    case("1번 문제도 틀렸습니다.", named=(1,), missed=(1,)),
]
