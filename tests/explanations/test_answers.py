"""The answer parser: what a reply states, compared with the key.

Tables of real-looking replies, Korean and English; each row names the verdict and the
statement the parser must report. A reply it cannot read is "unread", never "agrees": the
statements that are negated, hedged, asked, reported or name two answers, composed with
prose and distractors, are also checked as a property (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studyqueue.explanations import answers
from studyqueue.explanations.answers import Verdict

AGREES, DIFFERS, UNREAD, NO_KEY = (
    Verdict.AGREES,
    Verdict.DIFFERS,
    Verdict.UNREAD,
    Verdict.NO_KEY,
)
CITIES = ["부산", "서울", "인천", "대구"]  # key: 서울, choice 2 (B)
CAPITALS = ["Busan", "Seoul", "Incheon", "Daegu"]
SUMS = ["3", "4", "5"]  # numbers as choices: "4" is choice 2
BACKWARDS = ["2", "1"]  # choice 1 is "2": a bare "1" reads both ways

# (reply, choices, key, verdict, stated)
CASES = [
    # The fixed line the default prompt asks for.
    ("서울은 수도입니다.\n정답: ②", CITIES, "서울", AGREES, "②"),
    ("Seoul is the capital.\nAnswer: 2", CAPITALS, "Seoul", AGREES, "2"),
    ("서울은 수도입니다.\n정답: ①", CITIES, "서울", DIFFERS, "①"),
    ("Seoul is the capital.\nAnswer: 3", CAPITALS, "Seoul", DIFFERS, "3"),
    # Numbers written every way.
    ("...\n정답: 2", CITIES, "서울", AGREES, "2"),
    ("...\n정답: (2)", CITIES, "서울", AGREES, "(2)"),
    ("...\n정답: 2번", CITIES, "서울", AGREES, "2번"),
    ("...\n정답: 2)", CITIES, "서울", AGREES, "2)"),
    ("...\nAnswer: 2.", CAPITALS, "Seoul", AGREES, "2"),
    ("...\nAnswer: (2)", CAPITALS, "Seoul", AGREES, "(2)"),
    ("...\n정답: \uff08\uff12\uff09", CITIES, "서울", AGREES, "\uff08\uff12\uff09"),  # full width
    ("...\n정답: ❷", CITIES, "서울", AGREES, "❷"),
    ("...\nAnswer: option 2", CAPITALS, "Seoul", AGREES, "option 2"),
    ("...\n정답: 보기 ②", CITIES, "서울", AGREES, "보기 ②"),
    # Letters.
    ("...\nAnswer: B", CAPITALS, "Seoul", AGREES, "B"),
    ("...\nAnswer: (b)", CAPITALS, "Seoul", AGREES, "(b)"),
    ("...\nAnswer: b)", CAPITALS, "Seoul", AGREES, "b)"),
    ("...\nAnswer: b", CAPITALS, "Seoul", AGREES, "b"),
    ("...\nAnswer: C", CAPITALS, "Seoul", DIFFERS, "C"),
    ("...\nThe correct answer is (B) Seoul.", CAPITALS, "Seoul", AGREES, "(B) Seoul"),
    ("...\nThe correct answer is (C) Seoul.", CAPITALS, "Seoul", UNREAD, "(C) Seoul"),
    # Korean phrasings.
    ("...\n정답은 ②번입니다.", CITIES, "서울", AGREES, "②번입니다"),
    ("...\n따라서 답은 서울", CITIES, "서울", AGREES, "서울"),
    ("...\n따라서 답은 서울입니다.", CITIES, "서울", AGREES, "서울입니다"),
    ("...\n정답은 ④번입니다.", CITIES, "서울", DIFFERS, "④번입니다"),
    ("...\n따라서 ②번이 정답입니다.", CITIES, "서울", AGREES, "②번"),
    ("...\n그러므로 서울이 정답이다.", CITIES, "서울", AGREES, "서울"),
    ("...\n최종 정답: ②", CITIES, "서울", AGREES, "②"),
    ("...\n정답 : ② 서울", CITIES, "서울", AGREES, "② 서울"),
    ("...\n정답은 ② 부산입니다.", CITIES, "서울", UNREAD, "② 부산입니다"),
    ("...\n정답은 ①이 아니라 ②입니다.", CITIES, "서울", AGREES, "①이 아니라 ②입니다"),
    ("①번은 정답이 아닙니다. 부산은 항구 도시입니다.\n정답: ②", CITIES, "서울", AGREES, "②"),
    ("...\n답: 수도인 서울", CITIES, "서울", AGREES, "수도인 서울"),
    # English phrasings.
    ("...\n**Answer:** 2", CAPITALS, "Seoul", AGREES, "2"),
    ("...\n**Answer: B**", CAPITALS, "Seoul", AGREES, "B"),
    ("...\nThe answer is Seoul.", CAPITALS, "Seoul", AGREES, "Seoul"),
    ("...\nSo the final answer is $\\boxed{B}$.", CAPITALS, "Seoul", AGREES, "B"),
    ("...\nTherefore, (B) Seoul is the correct answer.", CAPITALS, "Seoul", AGREES, "(B) Seoul"),
    ("...\nThe best option is Daegu.", CAPITALS, "Seoul", DIFFERS, "Daegu"),
    ("...\nThe answer is not Busan but Seoul.", CAPITALS, "Seoul", AGREES, "not Busan but Seoul"),
    ("...\nThe answer is clearly Seoul, the capital.", CAPITALS, "Seoul", AGREES, None),
    ("...\nAnswer - 2", CAPITALS, "Seoul", AGREES, "2"),
    # The model corrects itself: the last statement counts.
    ("정답: ①\n잠깐, 다시 보니 정답은 ②입니다.", CITIES, "서울", AGREES, "②입니다"),
    ("정답: ②\n아니, 다시 계산하면 정답은 ③번입니다.", CITIES, "서울", DIFFERS, "③번입니다"),
    ("Answer: 1. Wait, correction. Answer: 2", CAPITALS, "Seoul", AGREES, "2"),
    ("Answer: 2\nOn second thought, the correct answer is (A).", CAPITALS, "Seoul", DIFFERS, "(A)"),
    # The key stored as a number, a letter, or another form of the text.
    ("...\n정답: ②", CITIES, "2", AGREES, "②"),
    ("...\nAnswer: B", CAPITALS, "B", AGREES, "B"),
    ("...\nAnswer: Seoul", CAPITALS, "2", AGREES, "Seoul"),
    ("...\nAnswer: 2", CAPITALS, "b", AGREES, "2"),
    ("...\nAnswer: 2", CAPITALS, " seoul ", AGREES, "2"),
    ("...\nAnswer: 3", CAPITALS, "B", DIFFERS, "3"),
    # Numbers that are themselves choices.
    ("2 + 2 = 4\nAnswer: 2", SUMS, "4", AGREES, "2"),
    ("2 + 2 = 4\nAnswer: 4", SUMS, "4", AGREES, "4"),
    ("...\nAnswer: 1", BACKWARDS, "1", UNREAD, "1"),
    ("...\nAnswer: (2)", BACKWARDS, "1", AGREES, "(2)"),
    ("...\n정답: 2번", BACKWARDS, "1", AGREES, "2번"),
    # Out of range, or not a choice at all.
    ("...\nAnswer: 7", CAPITALS, "Seoul", DIFFERS, "7"),
    ("...\nAnswer: Tokyo", CAPITALS, "Seoul", DIFFERS, "Tokyo"),
    ("...\n- 정답: 광주", CITIES, "서울", DIFFERS, "광주"),
    ("The answer lies in the history of Daegu and Busan.", CAPITALS, "Seoul", UNREAD, ""),
    # Open questions (no choices): the text itself.
    ("...\n정답: 서울", [], "서울", AGREES, "서울"),
    ("...\n정답은 서울입니다.", [], "서울", AGREES, "서울입니다"),
    ("...\nAnswer: 4", [], "4", AGREES, "4"),
    ("...\nAnswer: 5", [], "4", DIFFERS, "5"),
    ("...\nThe answer is Seoul.", [], "Seoul", AGREES, "Seoul"),
    ("...\nThe answer is Seoulite.", [], "Seoul", DIFFERS, "Seoulite"),
    ("...\n정답: 서울 또는 부산", [], "서울", DIFFERS, "서울 또는 부산"),
    ("...\n정답: 서울특별시", [], "서울", AGREES, "서울특별시"),
    ("...\n정답은 부산이 아니라 서울입니다.", [], "서울", AGREES, "부산이 아니라 서울입니다"),
    # Nothing stated: unread, never an agreement.
    ("Seoul is the capital of Korea.", CAPITALS, "Seoul", UNREAD, ""),
    ("서울은 대한민국의 수도입니다.", CITIES, "서울", UNREAD, ""),
    ("", CAPITALS, "Seoul", UNREAD, ""),
    ("The answer depends on the year you ask about.", CAPITALS, "Seoul", UNREAD, ""),
    ("①번은 정답이 아닙니다.", CITIES, "서울", UNREAD, ""),
    ("The answer is not Busan.", CAPITALS, "Seoul", UNREAD, ""),
    ("답변은 다음과 같습니다. 서울은 수도입니다.", CITIES, "서울", UNREAD, ""),
    ("A city like Seoul grew fast.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: 2, 3", CAPITALS, "Seoul", UNREAD, "2, 3"),
    ("...\n정답: ②, ③", CITIES, "서울", UNREAD, "②, ③"),
    ("...\n정답은 서울이나 부산입니다.", CITIES, "서울", UNREAD, "서울이나 부산입니다"),
    ("...\nThe answer is Seoul or Busan.", CAPITALS, "Seoul", UNREAD, "Seoul or Busan"),
    # Korean read as words: 정답률, 오답률 and 대답 are no labels; a clause conceded before
    # the label ("③이지만") doubts nothing else, a hedge in it does.
    ("정답률이 높은 보기는 ③이지만 정답은 ②이다.", CITIES, "서울", AGREES, "②이다"),
    ("오답률이 높은 ③과 달리 정답은 ②번이다.", CITIES, "서울", AGREES, "②번이다"),
    ("정답률이 낮은 문항이다.\n학생들의 대답은 ③이었다.", CITIES, "서울", UNREAD, ""),
    ("①이 정답인 것 같지만 정답은 ②이다.", CITIES, "서울", UNREAD, ""),
    ("확실하지 않지만 정답은 ②이다.", CITIES, "서울", UNREAD, ""),
    ("Option A looks plausible, but the answer is B.", CAPITALS, "Seoul", AGREES, "B"),
    ("I am not sure, but the answer is B.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\n해답: ②", CITIES, "서울", AGREES, "②"),
    ("...\n정답은 ②번이 틀렸다.", CITIES, "서울", UNREAD, ""),
    # No key: read, not judged.
    ("...\n정답: ②", CITIES, "", NO_KEY, "②"),
    ("Seoul is the capital.", CAPITALS, "  ", NO_KEY, ""),
]


@pytest.mark.parametrize("reply,choices,key,verdict,stated", CASES)
def test_a_reply_states_an_answer(reply, choices, key, verdict, stated):
    found = answers.compare(reply, choices, key)
    assert found.verdict == verdict
    if stated is not None:
        assert found.stated == stated


def test_the_table_is_large_and_bilingual():
    korean = [case for case in CASES if any("가" <= char <= "힣" for char in case[0])]
    assert len(CASES) >= 60 and len(korean) >= 20


def test_the_statement_is_its_line_as_written_up_to_a_bound():
    found = answers.compare("Answer: 2 " + "because " * 100, CAPITALS, "Seoul")
    assert found.verdict == AGREES and found.stated.startswith("2 because because")
    assert len(found.stated) <= answers.STATEMENT_CHARS


@pytest.mark.parametrize(
    "noise",
    ["정답 " * 350_000, "the answer is x " * 70_000, "정답: 다음과 같습니다\n" * 80_000],
    ids=["korean-labels", "english-labels", "label-lines"],
)
def test_a_megabyte_of_labels_is_read_from_its_end(noise):
    """A hostile reply (up to LLM_MAX_REPLY_BYTES) full of labels: only its end is read."""
    assert len(noise) > 1_000_000
    assert answers.compare(noise + "\n정답: ②", CITIES, "서울").verdict == AGREES
    assert answers.compare(noise, CITIES, "서울").verdict != AGREES


def test_an_answer_stated_only_far_before_the_end_is_not_read():
    reply = "정답: ②\n" + "서울은 조선 시대부터 수도였습니다. " * 500
    assert len(reply) > answers.TAIL_CHARS
    assert answers.compare(reply, CITIES, "서울").verdict == UNREAD


@pytest.mark.parametrize(
    "key,choices,expected",
    [
        ("서울", CITIES, 2),
        ("2", CITIES, 2),
        ("②", CITIES, 2),
        ("B", CAPITALS, 2),
        ("seoul", CAPITALS, 2),
        ("1", BACKWARDS, 2),  # the choice's text wins over its number
        ("Tokyo", CAPITALS, None),
        ("", CAPITALS, None),
    ],
)
def test_the_key_names_a_choice_by_text_number_or_letter(key, choices, expected):
    assert answers.key_choice(key, choices) == expected


# A statement that is negated, hedged, asked, reported or names two answers states none:
# never an agreement, whatever it names. Key: 서울 / Seoul, the second choice.
NEGATED = [
    ("...\n따라서 정답은 ②가 아닙니다.", CITIES, "서울", UNREAD, ""),
    ("...\n정답: ② 아님", CITIES, "서울", UNREAD, ""),
    ("...\n정답: ②는 틀렸다", CITIES, "서울", UNREAD, ""),
    ("...\n정답: ②번 (오답)", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 서울이 아니에요.", CITIES, "서울", UNREAD, ""),
    ("...\n답: 서울은 맞지 않습니다", CITIES, "서울", UNREAD, ""),
    ("...\nAnswer: B is incorrect", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: B is wrong, C is right", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: Seoul isn't it", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: 2 - no, 3", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nThe correct answer is never Seoul.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: not 2", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: 2 is false", [], "2", UNREAD, ""),
    ("...\nAnswer: B \u2717", CAPITALS, "Seoul", UNREAD, ""),  # ✗
    ("...\nAnswer: B is a trap", CAPITALS, "Seoul", UNREAD, ""),
    ("...\n정답: ②번 (함정)", CITIES, "서울", UNREAD, ""),
    ("...\n정답: ② 못 됨", CITIES, "서울", UNREAD, ""),
    # The turn still names the answer; and a choice's own words are no negation.
    ("...\n정답은 ①이 아니라 ②입니다.", CITIES, "서울", AGREES, None),
    ("...\n정답: ②번이 아닌 ③번", CITIES, "서울", DIFFERS, None),
    ("...\n정답: ③번이 아닌 ②번", CITIES, "서울", AGREES, None),
    ("...\n정답: ④ 해당 없음", ["가", "나", "다", "해당 없음"], "해당 없음", AGREES, None),
    ("...\nAnswer: D", ["Yes", "No", "Maybe", "None of these"], "None of these", AGREES, "D"),
    ("...\nAnswer: (D) None of these", ["Yes", "No", "Maybe", "None of these"], "D", AGREES, None),
    ("...\nAnswer: No", [], "No", AGREES, "No"),
    ("...\nAnswer: No", [], "Yes", UNREAD, ""),
]
# A distractor discussed after the answer line does not outrank it: the line opens its
# sentence, the distractor is named inside one (and is negated or reported besides).
# Key: 부산 / Busan, the first choice; the answer line says the second.
DISTRACTORS = [
    ("...\n정답: ②\n오답 ①: 부산은 정답 아님", CITIES, "부산", DIFFERS, "②"),
    ("...\n정답: ②\n- ① 부산 (정답 아님)", CITIES, "부산", DIFFERS, "②"),
    ("...\n정답: ②\n많은 학생들이 답은 ①이라고 생각합니다.", CITIES, "부산", DIFFERS, "②"),
    ("...\n정답: ②\n틀린 답: ① 부산", CITIES, "부산", DIFFERS, "②"),
    ("...\nAnswer: B\nA common wrong answer is Busan.", CAPITALS, "Busan", DIFFERS, "B"),
    ("...\nAnswer: B\nStudents often say the answer is Busan.", CAPITALS, "Busan", DIFFERS, "B"),
    ("...\nAnswer: B\nWrong answer: A (Busan is a port).", CAPITALS, "Busan", DIFFERS, "B"),
    ("...\nAnswer: B\nMany think Busan is the correct answer.", CAPITALS, "Busan", DIFFERS, "B"),
    ("...\nAnswer: B\n- (A) Busan: the answer is not Busan.", CAPITALS, "Busan", DIFFERS, "B"),
    # The same with the key on the answer line: it agrees.
    ("...\n정답: ①\n오답 ②: 서울은 정답 아님", CITIES, "부산", AGREES, "①"),
    ("...\nAnswer: A\nStudents often say the answer is Seoul.", CAPITALS, "Busan", AGREES, "A"),
    # An explanation headed "정답 해설" after the line is no answer line.
    ("...\n정답: ②\n정답 해설: ①번 부산은 수도가 아닙니다.", CITIES, "서울", AGREES, "②"),
    # An answer named inside a sentence before the line does not count either.
    ("Some say the answer is Busan.\nAnswer: B", CAPITALS, "Busan", DIFFERS, "B"),
    ("①번 부산이 정답이라고 생각하기 쉽지만 아닙니다.\n정답: ②", CITIES, "부산", DIFFERS, "②"),
    # After the line, another answer stated, or this one doubted: the reply contradicts itself.
    ("...\nAnswer: B\nSo Busan is the correct answer.", CAPITALS, "Busan", UNREAD, "B"),
    ("...\n정답: ②\n그러므로 부산이 정답입니다.", CITIES, "부산", UNREAD, "②"),
    ("...\nAnswer: A\nNo way Busan is the correct answer.", CAPITALS, "Busan", UNREAD, "A"),
    ("...\nAnswer: Busan\nSo Seoul is the correct answer.", [], "Busan", UNREAD, "Busan"),
]
# Hedged, asked, reported or rejected: no statement. Key: 서울 / Seoul.
HEDGED = [
    ("...\n정답은 ②번인 것 같지만 ③번입니다.", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 아마 ②번입니다.", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 ②번일 수도 있습니다.", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 ②번일까요?", CITIES, "서울", UNREAD, ""),
    ("...\n서울이 정답이다?", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 ②번이라고 생각합니다.", CITIES, "서울", UNREAD, ""),
    ("학생들은 흔히 답이 ②라 여긴다.", CITIES, "서울", UNREAD, ""),
    ("Many think Seoul is the correct answer, but it is Incheon.", CAPITALS, "Seoul", UNREAD, ""),
    ("It is not true that Seoul is the correct answer.", CAPITALS, "Seoul", UNREAD, ""),
    ("Students often say, however, that the answer is B.", CAPITALS, "Seoul", UNREAD, ""),
    (
        "Many think, given its history, that Seoul is the correct answer.",
        CAPITALS,
        "Seoul",
        UNREAD,
        "",
    ),
    ("Busan is a port, so Seoul is the correct answer.", CAPITALS, "Seoul", AGREES, "Seoul"),
    ("Seoul is the correct answer? No.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nThe answer is probably B.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nI think the answer is B.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nAnswer: B, I think", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nThe answer is B?", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nIf the answer is B, the question is wrong.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\nThe answer is maybe Seoul.", [], "Seoul", UNREAD, ""),
    ("...\nThe answer is B, presumably.", CAPITALS, "Seoul", UNREAD, ""),
    ("...\n정답은 ②번이지만 ③번도 가능합니다.", CITIES, "서울", UNREAD, ""),
    ("...\n정답은 ②번이겠지만 확인이 필요합니다.", CITIES, "서울", UNREAD, ""),
]
# Two answers at once: unread, however they are joined. Key: 서울 / Seoul.
TWO_ANSWERS = [
    ("...\nAnswer: B and C", CAPITALS, "Seoul", UNREAD, "B and C"),
    ("...\nAnswer: B C", CAPITALS, "Seoul", UNREAD, "B C"),
    ("...\nAnswer: B (or C)", CAPITALS, "Seoul", UNREAD, "B (or C)"),
    ("...\nAnswer: B or D", CAPITALS, "Seoul", UNREAD, "B or D"),
    ("...\nAnswer: B; C", CAPITALS, "Seoul", UNREAD, "B; C"),
    ("...\nAnswer: (B) and (c)", CAPITALS, "Seoul", UNREAD, None),
    ("...\nAnswer: Seoul Busan", CAPITALS, "Seoul", UNREAD, None),
    ("...\n정답: ② ③", CITIES, "서울", UNREAD, "② ③"),
    ("...\n정답: ②③", CITIES, "서울", UNREAD, "②③"),
    ("...\n정답: ②번과 ③번", CITIES, "서울", UNREAD, None),
    ("...\n정답: 2번 또는 3번", CITIES, "서울", UNREAD, None),
    ("...\n정답: [②] [③]", CITIES, "서울", UNREAD, None),
    ("...\n정답: 서울 부산", CITIES, "서울", UNREAD, None),
    ("...\n정답: ②·③", CITIES, "서울", UNREAD, None),
    ("...\n정답은 서울 또는 c입니다.", CITIES, "서울", UNREAD, None),
    # One answer written two ways is one answer.
    ("...\nAnswer: B (2)", CAPITALS, "Seoul", AGREES, "B (2)"),
    ("...\n정답: ②번 서울", CITIES, "서울", AGREES, "②번 서울"),
]
# The answer in common markup reads as itself. Key: 서울 / Seoul.
MARKUP = [
    ("...\n정답: [②]", CITIES, "서울", AGREES, "[②]"),
    ("...\n정답: 【②】", CITIES, "서울", AGREES, "【②】"),
    ("...\n정답: <b>②</b>", CITIES, "서울", AGREES, "②"),
    ("...\nAnswer: <strong>B</strong>", CAPITALS, "Seoul", AGREES, "B"),
    ("...\n정답: \\(\\boxed{2}\\)", CITIES, "서울", AGREES, "2"),
    ("...\nThe final answer is \\[\\boxed{\\text{B}}\\]", CAPITALS, "Seoul", AGREES, "B"),
    ("...\nAnswer: \uff22", CAPITALS, "Seoul", AGREES, "\uff22"),  # full-width B
    ("...\n정답: \u2475", CITIES, "서울", AGREES, "\u2475"),  # ⑵
    ("...\nAnswer: \u249d", CAPITALS, "Seoul", AGREES, "\u249d"),  # ⒝
    ("...\nAnswer: \u24b7", CAPITALS, "Seoul", AGREES, "\u24b7"),  # Ⓑ
    ("...\n**정답:**\n②", CITIES, "서울", AGREES, "②"),
    ("...\n**Answer:**\n\n**B**", CAPITALS, "Seoul", AGREES, "B"),
    # A label alone on its line, then a Markdown rule or a heading's blank line, then it.
    ("...\n**정답**\n\n---\n\n②", CITIES, "서울", AGREES, "②"),
    ("...\n## Answer\n\nB", CAPITALS, "Seoul", AGREES, "B"),
    ("We need the answer\nfirst: Paris is no capital.", CAPITALS, "Seoul", UNREAD, ""),
    # Markup reads a mismatch, or two answers, as such too.
    ("...\n정답: [③]", CITIES, "서울", DIFFERS, "[③]"),
    ("...\n정답: <b>②</b> <b>③</b>", CITIES, "서울", UNREAD, "② ③"),
]


@pytest.mark.parametrize(
    "reply,choices,key,verdict,stated",
    [
        *[pytest.param(*case, id=f"negated-{i}") for i, case in enumerate(NEGATED)],
        *[pytest.param(*case, id=f"distractor-{i}") for i, case in enumerate(DISTRACTORS)],
        *[pytest.param(*case, id=f"hedged-{i}") for i, case in enumerate(HEDGED)],
        *[pytest.param(*case, id=f"two-answers-{i}") for i, case in enumerate(TWO_ANSWERS)],
        *[pytest.param(*case, id=f"markup-{i}") for i, case in enumerate(MARKUP)],
    ],
)
def test_a_statement_that_is_not_plain_is_no_agreement(reply, choices, key, verdict, stated):
    found = answers.compare(reply, choices, key)
    assert found.verdict == verdict
    if stated is not None:
        assert found.stated == stated


# The property: replies composed of prose, statements and distractor lines. A statement
# template names choice {a} (and {o}, another or the same); {p} is a Korean particle slot.
def named(number: int, form: str, korean: bool) -> str:
    """Choice ``number`` (1-based) written one way: ``②``, ``2``, ``2번``, ``(2)``, ``B``,
    or its text."""
    return {
        "circled": "①②③④"[number - 1],
        "number": str(number),
        "beon": f"{number}번",
        "paren": f"({number})",
        "letter": "ABCD"[number - 1],
        "text": (CITIES if korean else CAPITALS)[number - 1],
    }[form]


FORMS = ["circled", "number", "beon", "paren", "letter", "text"]
PLAIN = {
    True: ["정답: {a}", "정답은 {a}입니다.", "따라서 답은 {a}", "최종 정답: {a}", "**정답:** {a}"],
    False: [
        "Answer: {a}",
        "The correct answer is {a}.",
        "So the final answer is {a}.",
        "**Answer:** {a}",
        "On second thought, the answer is {a}.",
    ],
}
NOT_PLAIN = {
    True: [
        # negated
        "정답: {a} 아님",
        "정답은 {a}이 아닙니다.",
        "정답: {a}은 틀렸다",
        "따라서 정답은 {a}가 아닙니다",
        "정답: {a} (오답)",
        # hedged, asked, reported, rejected
        "정답은 {a}인 것 같습니다.",
        "정답은 아마 {a}입니다.",
        "정답은 {a}일 수도 있습니다.",
        "정답은 {a}인 것 같지만 {o}입니다.",
        "정답은 {a}일까요?",
        "많은 학생들이 답은 {a}이라고 생각합니다.",
        "{a}이 정답이다?",
        # two answers
        "정답: {a} {o}",
        "정답: {a}, {o}",
        "정답은 {a} 또는 {o}입니다.",
        "정답: {a}과 {o}",
        "정답: {a}·{o}",
        "정답은 {a}이지만 {o}도 가능합니다.",
        "학생들은 흔히 답이 {a}라 여긴다.",
    ],
    False: [
        "Answer: {a} is incorrect",
        "Answer: {a} is wrong, {o} is right",
        "The answer is not {a}.",
        "It is not true that {a} is the correct answer.",
        "The answer is probably {a}.",
        "I think the answer is {a}.",
        "Many think {a} is the correct answer, but it is {o}.",
        "The answer is {a}?",
        "{a} is the correct answer? No.",
        "Students often say the answer is {a}.",
        "A common wrong answer is {a}.",
        "Answer: {a} and {o}",
        "Answer: {a} {o}",
        "Answer: {a} (or {o})",
        "The answer is {a} or {o}.",
        "Answer: {a}; {o}",
        "Answer: {a} \u2717",
        "Answer: {a} is a trap",
    ],
}
# Distractor lines after the answer line: named inside a sentence, negated or reported.
DISTRACTOR = {
    True: [
        "오답 {a}: {t}은 정답 아님",
        "- {a} {t} (정답 아님)",
        "많은 학생들이 답은 {a}라고 생각합니다.",
    ],
    False: [
        "A common wrong answer is {t}.",
        "Students often say the answer is {t}.",
        "- {a}: not {t}.",
    ],
}
PROSE = {
    True: [
        "서울은 1394년부터 수도였습니다.",
        "부산은 항구 도시이고 인천에는 공항이 있습니다.",
        "...",
    ],
    False: [
        "Seoul has been the capital since 1394.",
        "Busan is a port; Incheon has the airport.",
        "...",
    ],
}


@st.composite
def statement(draw, korean: bool, templates: dict[bool, list[str]], number: int | None = None):
    """One statement in a reply's language, naming choice ``number`` (any when None)."""
    template = draw(st.sampled_from(templates[korean]))
    first = number or draw(st.integers(1, 4))
    second = draw(st.integers(1, 4).filter(lambda other: other != first))
    a, o = (named(n, draw(st.sampled_from(FORMS)), korean) for n in (first, second))
    return template.format(a=a, o=o, t=(CITIES if korean else CAPITALS)[first - 1])


@st.composite
def not_plain_reply(draw):
    """Prose and statements that are no plain statement of choice 2 (the key): each is
    negated, hedged, asked, reported or names two answers, or plainly states another choice."""
    korean = draw(st.booleans())
    other = st.sampled_from([1, 3, 4]).flatmap(lambda n: statement(korean, PLAIN, n))
    lines = draw(
        st.lists(
            st.one_of(st.sampled_from(PROSE[korean]), statement(korean, NOT_PLAIN), other),
            min_size=1,
            max_size=5,
        )
    )
    return "\n".join(lines), korean


@st.composite
def plain_reply(draw):
    """Prose and any statements, then a plain answer line naming choice 2 (the key), then
    distractor lines about the other choices."""
    korean = draw(st.booleans())
    before = draw(
        st.lists(
            st.one_of(st.sampled_from(PROSE[korean]), statement(korean, NOT_PLAIN)), max_size=3
        )
    )
    line = draw(statement(korean, PLAIN, 2))
    others = st.sampled_from([1, 3, 4]).flatmap(lambda n: statement(korean, DISTRACTOR, n))
    after = draw(st.lists(others, max_size=2))
    return "\n".join([*before, line, *after]), korean


@settings(max_examples=300, deadline=None)
@given(not_plain_reply())
def test_no_reply_that_does_not_plainly_state_the_key_agrees(case):
    reply, korean = case
    found = answers.compare(reply, CITIES if korean else CAPITALS, "서울" if korean else "Seoul")
    assert found.verdict != AGREES, found


@settings(max_examples=300, deadline=None)
@given(plain_reply())
def test_a_plain_answer_line_agrees_whatever_surrounds_it(case):
    reply, korean = case
    found = answers.compare(reply, CITIES if korean else CAPITALS, "서울" if korean else "Seoul")
    assert found.verdict == AGREES, found


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Answer: 2", 2),
        ("2", 2),
        ("정답: ③", 3),
        ("Seoul", 2),
        ("(A)", 1),
        ("I cannot tell.", None),
        ("Answer: 2 or 3", None),
        ("Answer: 7", None),
        ("②", 2),
        ("2번", 2),
        ("B.", 2),
        ("Answer: 2\nBecause Seoul has been the capital since 1394.", 2),
        # Never a false reading: asked, hedged, denied, or two answers name none.
        ("2?", None),
        ("2 (maybe)", None),
        ("Probably 2", None),
        ("Answer: not 2", None),
        ("2번이 아니다", None),
        ("정답: ② 아님", None),
        ("Answer: none", None),
        ("Answer: 2\nAnswer: 3", None),
        ("Answer: 2\n" + "Seoul. " * 200, None),  # no short reply: max_tokens was ignored
    ],
)
def test_a_short_reply_names_a_choice_or_none(reply, answer):
    """The key audit's samples and the blind verifier's reply: the answer alone."""
    assert answers.choice_named(reply, ["Busan", "Seoul", "Incheon"]) == answer
