"""A probe of sentences from learners' session summaries, written independently of their readers.

The sentences were written, and labelled by their meaning, by someone who had not read the
summary readers, their prompt or their tests. Every sentence is from the summary of a session
of 10 questions in which the learner got 7 right and missed questions 2, 5 and 9, in the
phrasings models use, about 60 % in Korean and the rest in English.

Each ``Sentence`` holds:

- ``score``: ``"true"`` if the sentence states the learner's score and it is 7 of 10 right in any
  form (7/10, 10문제 중 7문제, 3문제를 틀림, 오답률 30 %, 정답률 70 %, seven out of ten, only
  three wrong); ``"false"`` if it states a score that is not 7 of 10 right (including a list of
  missed questions said to be the only ones missed, when that list is not three long);
  ``"none"`` if it states no score (numbers that are fractions, dates, times, repetitions,
  ordinals, durations, question or choice numbers, a change since last time).
- ``named``: the question numbers the sentence names as questions (3번 문제, 문제 5, 5번은, Q9,
  Question 2, 2, 5, 9번, 8~10번, the third question), not choice numbers (5번 문제에서 3번을
  골랐는데 names question 5 only) and not counts, repetitions or dates.
- ``missed``: those of ``named`` that the sentence says the learner missed, whether or not that
  is true of the session (a sentence may be wrong about it; it is labelled by what it says).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sentence:
    """One sentence of a summary, with what it says of the score and of the questions."""

    text: str
    score: str  # "true", "false" or "none"
    named: frozenset[int]
    missed: frozenset[int]


def _s(
    text: str, score: str, named: tuple[int, ...] = (), missed: tuple[int, ...] = ()
) -> Sentence:
    return Sentence(text, score, frozenset(named), frozenset(missed))


PROBE: list[Sentence] = [
    # Korean: the score, right.
    _s("이번 세션에서는 10문제 중 7문제를 맞혔어요.", "true"),
    _s("총 10문제 가운데 일곱 문제를 맞혔네요!", "true"),
    _s("3문제를 틀렸지만 전체적으로 잘 풀었습니다.", "true"),
    _s("정답률은 70%로, 지난번보다 안정적이에요.", "true"),
    _s("오답률 30%이니 틀린 문제만 다시 보면 충분합니다.", "true"),
    _s("7/10으로 세션을 마쳤습니다.", "true"),
    _s("열 문제 중 세 문제만 틀렸어.", "true"),
    _s("100점 만점에 70점이에요.", "true"),
    _s("7문제를 맞혔으니 다음에는 8문제를 목표로 해 봐요.", "true"),
    _s(
        "10문제 중 7문제를 맞혔고, 2번, 5번, 9번 문제를 틀렸어요.",
        "true",
        (2, 5, 9),
        (2, 5, 9),
    ),
    _s("틀린 문제는 2번, 5번, 9번 세 개예요.", "true", (2, 5, 9), (2, 5, 9)),
    _s("2, 5, 9번만 틀리고 나머지는 모두 맞혔습니다.", "true", (2, 5, 9), (2, 5, 9)),
    _s("지난 세션에서는 4문제를 틀렸지만 이번에는 3문제만 틀렸어요.", "true"),
    _s("정답률이 지난번 50%에서 이번에 70%로 올랐어요.", "true"),
    _s("문제 10개 중 3개를 놓쳤지만 기본 개념은 잘 잡혀 있어요.", "true"),
    # Korean: a score, wrong.
    _s("10문제 중 3문제를 맞혔습니다.", "false"),
    _s("4문제를 틀렸어요.", "false"),
    _s("정답률 60%로, 조금 더 연습이 필요해요.", "false"),
    _s("10문제 중 2문제를 틀렸어.", "false"),
    _s("여덟 문제를 맞혀서 80%의 정답률을 기록했어요.", "false"),
    _s("9번 말고는 다 맞혔어요.", "false", (9,), (9,)),
    _s("2번과 5번을 틀렸고 나머지는 다 맞혔네요.", "false", (2, 5), (2, 5)),
    _s("오답률이 40%라서 복습이 꼭 필요합니다.", "false"),
    # Korean: no score; questions named, some missed.
    _s("2번 문제는 틀렸지만 3번 문제는 맞혔어요.", "none", (2, 3), (2,)),
    _s("5번 문제에서 3번을 골랐는데, 정답은 1번이었어요.", "none", (5,), (5,)),
    _s("문제 5와 문제 9는 같은 개념을 다루고 있어요.", "none", (5, 9)),
    _s("5번 문제를 못 맞혔고 9번도 맞히지 못했어요.", "none", (5, 9), (5, 9)),
    _s("2번은 틀린 반면 7번은 어렵게 맞혔네요.", "none", (2, 7), (2,)),
    _s("5번은 맞힐 수 있었는데 계산 실수로 틀렸어요.", "none", (5,), (5,)),
    _s("9번 문제는 거의 맞힐 뻔했어요.", "none", (9,), (9,)),
    _s("8~10번은 분수의 덧셈을 묻는 문제였어요.", "none", (8, 9, 10)),
    _s("1~4번 중에서는 2번만 틀렸어요.", "none", (1, 2, 3, 4), (2,)),
    _s("3번 문제를 틀렸어요.", "none", (3,), (3,)),
    _s("7번 문제는 맞혔어요.", "none", (7,)),
    _s("2번에서는 ③번 보기를 골랐어요.", "none", (2,)),
    _s("9번 문제에서 1/3과 1/2을 헷갈려 틀렸어요.", "none", (9,), (9,)),
    _s("틀린 2번, 5번, 9번 문제를 다시 풀어 보세요.", "none", (2, 5, 9), (2, 5, 9)),
    _s("문제 2, 5, 9를 내일 다시 풀어 보세요.", "none", (2, 5, 9)),
    _s("5번 문제를 틀린 줄 알았는데 맞혔더라고요.", "none", (5,)),
    _s("2번과 5번은 틀렸지만 9번은 맞혔어요.", "none", (2, 5, 9), (2, 5)),
    _s("10번 문제까지 끝까지 집중해서 풀었네요.", "none", (10,)),
    _s("3번째 문제부터 풀이 시간이 조금씩 길어졌어요.", "none", (3,)),
    # Korean: no score, no question named.
    _s("1/2를 더하면 분모를 먼저 통분해야 해요.", "none"),
    _s("12/1에 다시 풀어 보세요.", "none"),
    _s("같은 유형을 10번 반복해서 연습하세요.", "none"),
    _s("비슷한 유형을 2번 연속으로 틀렸어요.", "none"),
    _s("하루 20분씩 꾸준히 복습하면 좋겠어요.", "none"),
    _s("3월 5일 오후 3시에 시작해서 40분 동안 공부했어요.", "none"),
    _s("10문제를 모두 풀었고, 한 문제당 평균 2분이 걸렸어요.", "none"),
    _s("지난주보다 2문제를 더 맞혔어요.", "none"),
    # English: the score, right.
    _s("You got 7 out of 10 questions right.", "true"),
    _s("Seven out of ten - nice work!", "true"),
    _s("You scored 70% in this session.", "true"),
    _s("You missed 3 of the 10 questions, so focus on those.", "true"),
    _s("About 30% of your answers were wrong.", "true"),
    _s("You got seven right and three wrong.", "true"),
    _s("You made three mistakes out of ten questions.", "true"),
    _s(
        "You answered 7 of 10 correctly and missed Questions 2, 5 and 9.",
        "true",
        (2, 5, 9),
        (2, 5, 9),
    ),
    # English: a score, wrong.
    _s("You missed 4 of 10.", "false"),
    _s("You got six right.", "false"),
    _s("Q9 was the only one you got wrong.", "false", (9,), (9,)),
    _s("Your accuracy was 80 percent, a big step up.", "false"),
    _s("You got 3 out of 10 right.", "false"),
    _s("You were right on 9 of the 10.", "false"),
    # English: no score; questions named, some missed.
    _s("You missed questions 2, 5 and 9.", "none", (2, 5, 9), (2, 5, 9)),
    _s("You didn't get Question 2 right.", "none", (2,), (2,)),
    _s("Questions 8, 9 and 10 were about fractions.", "none", (8, 9, 10)),
    _s("Question 5 asked for option 3, and you chose option 4.", "none", (5,), (5,)),
    _s("On Q9 you picked choice 1, which was wrong.", "none", (9,), (9,)),
    _s(
        "You got Questions 1 through 4 right, but missed Question 5.", "none", (1, 2, 3, 4, 5), (5,)
    ),
    _s("Questions 6-8 went smoothly.", "none", (6, 7, 8)),
    _s("You chose answer 2 on question 5, and it wasn't right.", "none", (5,), (5,)),
    _s(
        "Questions 2 and 9 were the hardest, but you got Question 9 right in the end.",
        "none",
        (2, 9),
    ),
    _s("You got question 3 right, while question 2 was a miss.", "none", (2, 3), (2,)),
    # English: no score, no question named.
    _s("Spend 20 minutes a day on fractions.", "none"),
    _s("Try again on 12/3.", "none"),
    _s("Your next review starts at 7:30 tomorrow.", "none"),
    _s("Add 1/2 to both sides before you simplify.", "none"),
    _s("Work through each worked example 10 times.", "none"),
    _s("You finished all 10 questions in 18 minutes.", "none"),
]
