"""The summary reader on the labelled corpus (``summary_corpus``): each sentence's score
figures, the questions it names and those it says were missed, read as labelled; and the
probe sentences one by one through ``summaries.check``: none certifies a false score or flags
a true one."""

from __future__ import annotations

import pytest

from studyqueue.models import SessionAnswer
from studyqueue.sessions import reading, summaries
from tests.sessions.summary_corpus import CORPUS, MISSED, TOTAL, Case
from tests.sessions.summary_probe import PROBE, Sentence

# The corpus's session: 10 answers, 3, 5 and 9 missed.
ANSWERS = [SessionAnswer(position=n, correct=n not in MISSED) for n in range(1, TOTAL + 1)]


def test_the_corpus_is_large_and_in_both_languages():
    assert len(CORPUS) >= 80
    korean = sum(any("\uac00" <= ch <= "\ud7a3" for ch in c.text) for c in CORPUS)
    assert 20 <= korean <= len(CORPUS) - 20


@pytest.mark.parametrize("case", CORPUS, ids=[c.text[:40] for c in CORPUS])
def test_each_sentence_is_read_as_labelled(case: Case):
    read = reading.read(case.text)
    assert tuple(s for f in read.figures if (s := f.score(TOTAL))) == case.scores
    assert (read.named, read.missed) == (case.named, case.missed)
    flags = summaries.check(case.text, ANSWERS).flags
    assert ("score_mismatch" in flags) == case.false_score
    assert ("no_score_stated" in flags) == (not case.scores)


@pytest.mark.parametrize(
    ("text", "agrees"),
    [
        ("10문제 중 3문제를 틀렸습니다.", True),
        ("10문제 중 7문제를 틀렸습니다.", False),
        ("You missed 3 of 10.", True),
        ("You missed 7 of 10.", False),
        ("오답률 30%입니다.", True),
        ("오답률 70%입니다.", False),
        ("점수: 10문제 중 6문제 (60%). 3번 문제에서 1/2는 0.5입니다.", False),
        ("점수: 10문제 중 6문제. 12/1에 다시 푸세요.", False),
        ("점수: 10문제 중 7문제. 12/1에 다시 푸세요.", True),
        ("점수: 7/10. 10문제 중 4문제를 틀렸습니다.", False),
    ],
)
def test_the_probe_sentences_never_certify_a_false_score_nor_flag_a_true_one(text, agrees):
    flags = summaries.check(text, ANSWERS).flags
    assert ("score_mismatch" not in flags) == agrees
    assert "no_score_stated" not in flags


@pytest.mark.parametrize(
    ("text", "named", "missed"),
    [
        ("10번 반복해서 푸세요. 2번 연속 맞혔어요.", set(), set()),
        ("1번은 맞혔고 3번은 틀렸습니다.", {1, 3}, {3}),
        ("Questions 8, 9 and 10 were wrong.", {8, 9, 10}, {8, 9, 10}),
        ("8~10번 문제를 틀렸습니다.", {8, 9, 10}, {8, 9, 10}),
        ("Review it 3 times, and 2번 더.", set(), set()),
    ],
)
def test_the_probe_questions(text, named, missed):
    read = reading.read(text)
    assert (read.named, read.missed) == (named, missed)


def test_a_figure_without_its_meaning_is_unread_and_korean_numerals_are_numbers():
    assert summaries.check("10문제 중 7문제.", ANSWERS).stated == {}
    assert summaries.check("열 문제 중 일곱 문제를 맞혔어요.", ANSWERS).stated == {
        "right": 7,
        "total": 10,
    }
    assert summaries.check("세 문제를 틀렸어요.", ANSWERS).stated == {"right": 7}


# The probe's session: 10 answers, 7 right, 2, 5 and 9 missed (written apart from the reader).
PROBE_ANSWERS = [SessionAnswer(position=n, correct=n not in (2, 5, 9)) for n in range(1, 11)]


@pytest.mark.parametrize("sentence", PROBE, ids=[s.text[:40] for s in PROBE])
def test_no_probe_sentence_certifies_a_false_score_or_flags_a_true_one(sentence: Sentence):
    checked = summaries.check(sentence.text, PROBE_ANSWERS)
    if sentence.score == "false":
        assert not checked.stated or "score_mismatch" in checked.flags
    else:
        assert "score_mismatch" not in checked.flags
    if sentence.score == "none":
        assert not checked.stated  # a figure that is no score is not read as one
    if "wrong_question" in checked.flags:  # only when it says a right one was missed
        assert sentence.missed - {2, 5, 9}
