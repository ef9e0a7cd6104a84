"""What the blind verifier may read (``explanations.hiding``): on every explanation of the corpus
(``hiding_corpus``), no statement of the answer survives and every piece of reasoning is kept
as written; and when the statements cannot be hidden reliably, ``blind`` says why."""

from __future__ import annotations

import re
import time

import pytest

from studyqueue.explanations import answers
from studyqueue.explanations.hiding import blind, hide_statements
from tests.explanations.hiding_corpus import CORPUS, MINERALS_EN, MINERALS_KO, Case
from tests.explanations.hiding_probe import PROBE

# What may be left once the reasoning is taken out: layout (list marks, headings, quotes,
# rules, emphasis, punctuation), never a word, a number or a choice's mark.
_LAYOUT = re.compile(r"(?m)^\s*(?:[-*+•>]|#{1,6}|\d{1,2}[.)])\s*")
_SAID = re.compile(rf"[^\W_]+|[{answers._CIRCLED_CLASS}]")


def test_the_corpus_is_large_and_says_both():
    assert len(CORPUS) >= 60
    assert len({case.name for case in CORPUS}) == len(CORPUS)
    assert sum(len(case.statements) for case in CORPUS) >= 100
    for case in CORPUS:
        assert case.statements, case.name  # every explanation states its answer somewhere
        assert case.reasoning, case.name


@pytest.mark.parametrize("case", CORPUS, ids=lambda case: case.name)
def test_no_statement_survives_and_every_reasoning_piece_stays(case: Case):
    shown = hide_statements(case.text, case.choices)
    for piece in case.reasoning:
        assert piece in shown, f"reasoning cut: {piece!r}\nshown: {shown!r}"
    rest = shown
    for piece in sorted([*case.reasoning, *case.neutral], key=len, reverse=True):
        rest = rest.replace(piece, " ")
    left = _SAID.findall(_LAYOUT.sub("", rest))
    assert not left, f"statement left: {left}\nshown: {shown!r}"
    # The answer reader, which finds the answer line of a stored explanation, finds none.
    assert answers.read(shown, case.choices)[1] == "junk"
    assert blind(case.text, case.choices).problem == ""


def test_the_probe_written_apart_from_the_hider_hides_every_statement():
    """Explanations with words that hold an answer word (들어맞다, 정답률, "right angle"),
    written by someone who had not read the hider: no statement shown, >= 95 % kept."""
    kept = total = 0
    for case in PROBE:
        shown = hide_statements(case.text, case.choices)
        rest = shown
        for piece in sorted([*case.reasoning, *case.neutral], key=len, reverse=True):
            rest = rest.replace(piece, " ")
        for piece in case.statements:
            assert piece.strip() not in rest, f"{case.name}: statement shown: {piece!r}"
        kept += sum(piece in shown for piece in case.reasoning)
        total += len(case.reasoning)
    assert kept / total >= 0.95, f"{kept}/{total} reasoning pieces kept"


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ("Because 2 + 2 equals 4.\n**Answer:** 4", "Because 2 + 2 equals 4."),
        ("세종이 만들었다.\n정답은 ②번입니다.", "세종이 만들었다."),
        (
            "Reasoning here.\n**정답:**\n②\nMore reasoning here.",
            "Reasoning here.\nMore reasoning here.",
        ),
        ("B is wrong.\n(C) Paris is the correct answer.", "B is wrong."),
        ("No statement at all.", "No statement at all."),
        # A paragraph loses its statement, not its reasoning.
        ("정답은 ②번이다. 칼슘은 뼈의 주성분이다.", "칼슘은 뼈의 주성분이다."),
        # Distractors judged wrong, a wrong answer named as such, "to answer": reasoning.
        ("①은 철이므로 틀리다. ③은 오답이다.", "①은 철이므로 틀리다. ③은 오답이다."),
        ("A is not correct: iron is in blood.", "A is not correct: iron is in blood."),
        ("To answer this, recall what bones hold.", "To answer this, recall what bones hold."),
        ("① 철은 헤모글로빈에 있으므로 맞지 않다.", "① 철은 헤모글로빈에 있으므로 맞지 않다."),
    ],
)
def test_hiding_keeps_the_reasoning_around_a_statement(reply, shown):
    assert hide_statements(reply, ["Busan", "Seoul", "Paris"]) == shown


FOUNDERS = ["온조", "주몽", "박혁거세", "김수로"]


@pytest.mark.parametrize(
    "reasoning",
    [
        "② 주몽은 졸본에서 나라를 세웠으므로 조건에 들어맞는다.",  # 들어맞다 holds 맞다
        "① 온조는 백제를 세웠으므로 조건에 알맞지 않다.",
        "③ 박혁거세의 신라는 훗날 고구려에 맞서는 세력이 되었다.",
        "② 주몽의 건국 연도는 기록과 맞아떨어진다.",
        "이 문항은 정답률이 낮은 편으로, ① 온조와 헷갈리기 쉽다.",
        "오답률이 가장 높은 ① 온조는 백제의 시조이다.",
        "옳고 그름을 따지면 ④ 김수로는 가야의 시조이다.",
        "학생들의 대답은 ③과 ④로 나뉘었다.",
        "In option B the right-hand side is 7.",
        "The Samguk sagi answers the question of who founded Goguryeo.",
        "Read correctly, option A describes Onjo.",
    ],
)
def test_a_word_that_holds_an_answer_word_is_reasoning(reasoning):
    """Korean is read as words: 들어맞다 is not 맞다, 정답률 is not 정답."""
    assert hide_statements(reasoning, FOUNDERS) == reasoning


@pytest.mark.parametrize(
    "statement",
    [
        "②가 맞다.",
        "정답은 ②이다.",
        "해답은 ② 주몽이다.",
        "답으로 알맞은 것은 ②이다.",
        "②가 가장 알맞다.",
        "고를 보기는 ②이다.",
        "따라서 조건에 들어맞는 것은 ② 주몽이다.",
        "그러므로 ②번을 택한다.",
        "따라서 ② 주몽이 옳다.",
        "The best choice here is B.",
    ],
)
def test_a_statement_in_any_form_is_hidden(statement):
    assert hide_statements(f"주몽은 졸본에서 고구려를 세웠다. {statement}", FOUNDERS) == (
        "주몽은 졸본에서 고구려를 세웠다."
    )


@pytest.mark.parametrize(
    "reply",
    [
        "정답은, 두 번째 보기인 칼슘이다.",  # a label, then its answer in the next clause
        "The answer, as the table shows, is calcium.",
        "B) Calcium: correct.",  # the verdict in another clause than its choice
        "**정답**\n\n---\n\n칼슘",
        "The answer is B, which is calcium.",
    ],
)
def test_a_statement_spread_over_clauses_goes_whole(reply):
    assert hide_statements(reply, MINERALS_EN + MINERALS_KO) == ""


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("정답: ②", "nothing of the reasoning is left"),
        ("**정답은 ② 칼슘입니다.**\n\n정답: ②", "nothing of the reasoning is left"),
        ("① 철\n② 칼슘\n③ 나트륨\n④ 칼륨\n\n정답: ②", "nothing of the reasoning is left"),
        ("② 칼슘이 정답이다. 칼슘.", "nothing of the reasoning is left"),
    ],
)
def test_blind_says_why_the_verifier_must_not_be_asked(reply, problem):
    found = blind(reply, MINERALS_KO)
    assert found.problem.startswith(problem), found


def test_blind_shows_the_reasoning_of_a_sound_explanation():
    found = blind("칼슘은 뼈의 주성분이다. 따라서 ②가 맞다.\n정답: ②", MINERALS_KO)
    assert (found.text, found.problem) == ("칼슘은 뼈의 주성분이다.", "")


def test_hiding_a_huge_reply_takes_linear_time():
    """A reply may be megabytes (LLM_MAX_REPLY_BYTES): every sentence is read a bounded
    number of times, whatever it holds. CPU time, not wall time: the bound is about the
    work, which other processes on a loaded machine do not change (1-2 s here)."""
    for hostile in ("② 맞다 " * 40000, "칼슘은 뼈의 주성분이다. " * 20000, "a, " * 100000):
        started = time.process_time()
        hide_statements(hostile, MINERALS_KO)
        assert time.process_time() - started < 5
