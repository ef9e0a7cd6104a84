"""The step check's pure parts (``explanations/step_check.py``): how an explanation is split
into numbered sentences, the prompt, and how a reply is read, in both languages and the forms
models write; a reply that is not plainly one sentence or none is ``unsure``, never ``ok``."""

from __future__ import annotations

import pytest

from studyqueue.explanations.step_check import SYSTEM, build_messages, read, sentences, steps
from studyqueue.models import StepCheck, StudyQuestion

FIVE = [f"Sentence number {n} of the explanation." for n in range(1, 6)]
WRONG, OK, UNSURE = StepCheck.WRONG_STEP, StepCheck.OK, StepCheck.UNSURE


@pytest.mark.parametrize(
    ("reply", "verdict", "step"),
    [
        # A wrong step, however it is named.
        ("Step: 3", WRONG, 3),
        ("3", WRONG, 3),
        ("[3]", WRONG, 3),
        ("문장 3", WRONG, 3),
        ("3번 문장이 틀렸다…", WRONG, 3),
        ("3번 문장이 틀렸습니다", WRONG, 3),
        ("First wrong step: 3 — it claims the opposite.", WRONG, 3),
        ("오류: 3", WRONG, 3),
        ("The error is in sentence 3.", WRONG, 3),
        ("**3**", WRONG, 3),
        ("Step: **3**", WRONG, 3),
        ("`Step: 3`", WRONG, 3),
        ("Step: \uff13", WRONG, 3),  # a full-width digit
        ("Sentence 3 is not correct.", WRONG, 3),  # a negation names a wrong step too
        ("3번 문장은 옳지 않습니다.", WRONG, 3),
        ("Step: 3, step 3 again", WRONG, 3),
        ('[3] "Sentence number 3 of the explanation."', WRONG, 3),  # its text echoed
        ("Step: 5", WRONG, 5),
        ("확실히 3번이 틀렸다", WRONG, 3),  # 확실히: no hedge
        ("3번 문장이 같은 말을 되풀이하며 틀렸다", WRONG, 3),  # 같다 without 것: no hedge
        # No wrong step, plainly said.
        ("none", OK, None),
        ("Step: none", OK, None),
        ("None.", OK, None),
        ("없음", OK, None),
        ("오류 없음", OK, None),
        ("No error.", OK, None),
        ("No errors found", OK, None),
        ("틀린 문장이 없습니다.", OK, None),
        ("모든 문장이 옳습니다.", OK, None),
        ("All steps are correct.", OK, None),
        ("모두 맞다", OK, None),
        # Anything else: unsure, never an agreement.
        ("", UNSURE, None),
        ("   ", UNSURE, None),
        ("3 or 4", UNSURE, None),
        ("3, 4", UNSURE, None),
        ("Step: 3\nStep: 4", UNSURE, None),
        ("none of the sentences except 3 is right", UNSURE, None),
        ("No error, except in sentence 2", UNSURE, None),
        ("Step: 6", UNSURE, None),  # no such sentence
        ("Step: 0", UNSURE, None),
        ("Step: N", UNSURE, None),
        ("3?", UNSURE, None),
        ("maybe 3", UNSURE, None),
        ("Probably none.", UNSURE, None),
        ("none?", UNSURE, None),
        ("아마 3번 문장", UNSURE, None),
        ("잘 모르겠습니다", UNSURE, None),
        ("3번 또는 4번", UNSURE, None),
        ("It is not true that there is no error.", UNSURE, None),
        ("I can't say there is no error.", UNSURE, None),
        ("오류가 없지 않다", UNSURE, None),
        ("오류가 없는 것 같다", UNSURE, None),
        ("3번 문장이 틀린 것 같습니다", UNSURE, None),
        ("확실하지 않지만 3번", UNSURE, None),
        ("오류가 없다고 할 수 없다", UNSURE, None),
        ("I cannot tell.", UNSURE, None),
        ("The explanation is fine overall.", UNSURE, None),
        ("Step: 3 (it says 2 + 2 = 5)", UNSURE, None),  # a second number: not read
        ("Step: 3" + " x" * 600, UNSURE, None),  # far longer than asked for
    ],
)
def test_a_reply_is_read_as_one_wrong_step_none_or_unsure(reply, verdict, step):
    assert read(reply, FIVE) == (verdict, step)


def test_without_sentences_nothing_is_ok():
    assert read("none", []) == (UNSURE, None)


def test_sentences_are_split_line_by_line_and_their_places_are_kept():
    text = (
        "**정답: ②**\n\n"
        "칼슘은 뼈를 만든다. 철은 혈액에 있다!\n"
        "- ① 철: 헤모글로빈의 성분이다.\n"
        "1. 목록의 첫째 줄이다.\n"
        "   \n"
        "Why? Because it is so.\r\n"
        "끝"
    )
    assert sentences(text) == [
        "정답: ②**",  # "**" at a line's start reads as a list mark (``hiding``'s rule)
        "칼슘은 뼈를 만든다.",
        "철은 혈액에 있다!",
        "① 철: 헤모글로빈의 성분이다.",
        "1. 목록의 첫째 줄이다.",  # a list's number is no sentence end
        "Why?",
        "Because it is so.",
        "끝",
    ]
    assert [text[start:end] for start, end in steps(text)] == sentences(text)
    assert sentences("") == [] and sentences("\n \n") == []


def test_the_prompt_shows_the_key_as_reference_and_every_sentence_numbered():
    question = StudyQuestion(text="뼈의 주성분은?", choices=["철", "칼슘", "나트륨"], answer="칼슘")
    system, user = build_messages(question, "칼슘은 뼈를 만든다. 철도 뼈를 만든다.\n정답: ②")
    assert system == {"role": "system", "content": SYSTEM}
    assert user["content"] == (
        "Question:\n뼈의 주성분은?\n\nChoices:\n1. 철\n2. 칼슘\n3. 나트륨\n\n"
        "Reference answer: 2. 칼슘\n\n"
        "Explanation:\n[1] 칼슘은 뼈를 만든다.\n[2] 철도 뼈를 만든다.\n[3] 정답: ②"
    )
