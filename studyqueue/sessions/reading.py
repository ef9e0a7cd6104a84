"""What a session summary states, read as words (``words.morphemes``; English words are its
Latin tokens, matched by their own word lists): each score figure with the word beside it that
says whether it counts right or wrong answers, and per clause the questions it names and
whether it says they were missed. Pure text: the session's figures are the caller's."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from studyqueue.explanations.words import Morpheme, morphemes, native_number

RIGHT, WRONG = 1, -1
_RIGHT = {"맞히", "맞", "맞추", "정답", "점수", "득점", "score", "scored", "got", "accuracy"}
_RIGHT |= {"right", "correct", "correctly"}
_WRONG = {"틀리", "놓치", "오답", "실수", "wrong", "incorrect", "incorrectly", "missed", "miss"}
_WRONG |= {"missing", "mistake", "mistakes"}
_NOT = {"못", "안", "not", "never"}
# What may stand between a figure and the word that says what it counts ("10문제 중 7문제를
# 모두 맞혔다", "7 of 10 questions were correct"); anything else (a noun, a comma) parts them.
_COUNTER = {"문제", "문항", "개", "questions", "question", "answers"}
_GLUE = _COUNTER | {"수", "개수", "총", "전체", ":", "(", ")", "of", "the", "your", "were"}
_GLUE |= {"was", "are", "is", "all", "only", "in", "total", "not"}
_GLUE_TAGS = ("VCP", "XSN", "MAG")  # 입니다, 정답-률, 모두
# Joins two clauses: 맞혔고, 맞혔지만, 맞혔으나, 맞혔는데, 반면, but…
_CLAUSE_END = {"고", "지만", "으나", "는데", "은데", "며", "으며", "면서", "으면서"}
_BETWEEN = {"반면", "but", "whereas", "while", "however", ";"}
# A clause that compares or looks back ("지난번보다 2문제를 더", "last time"): its figures are
# another session's, or a difference, never this score.
_COMPARED = {"지나", "지난", "이전", "저번", "보다", "더", "덜", "last", "previous", "than", "more"}
# So does one about other learners ("다른 학습자의 86%가 맞히는 문제"): a question's difficulty.
_COMPARED |= {"fewer", "less", "earlier", "before", "다른", "other", "others", "learners"}
_COMPARED |= {"대부분", "시도", "students"}  # "대부분의 학습자(86%)", "첫 시도에 86%가"
# A question by its number: "Question 3", "Q3", "#3", "문제 3" before it; "3번 문제",
# "3번은" after it; lists and ranges between ("8, 9, 10번", "8~10번", "questions 8 to 10").
_PREFIX = {"question", "questions", "q", "#", "문제", "문항"}
_LIST = {",", "·", "과", "와", "및", "and", "or", "&"}
_RANGE = {"~", "-", "\u2013", "to", "through", "부터"}
_CHOOSE = {"고르", "선택", "chose", "chosen", "picked"}  # "2번을 골랐지만": a choice
# A time ("5분 12초", "45 seconds") is read where its clause says it was spent or measured:
# advice ("하루 평균 10분씩 복습하세요", "10 minutes a day") is not a figure of the session.
_UNITS = {"초": 1, "second": 1, "seconds": 1, "분": 60, "minute": 60, "minutes": 60}
_SPENT = {"걸리", "소요", "총", "중앙", "중앙값", "중간값", "평균", "took", "spent", "total"}
_SPENT |= {"median", "average", "mean", "taking"}
_ADVICE = {"씩", "매일", "하루", "day", "daily", "every"}
# A tag's figure comes after its name, with no "score" or "overall" between.
_OVERALL = {"점수", "score", "overall", "전체", "총", "total"}
_OWN_WORDS = _RIGHT | _WRONG | _GLUE | _SPENT | _OVERALL


@dataclass(frozen=True)
class Figure:
    """A score figure as stated: ``part`` of ``whole`` (either unknown) and/or a percent,
    counting right or wrong answers."""

    part: float | None
    whole: float | None
    percent: float | None
    counts: int
    about: str = ""  # the tag whose figure it is ("문법은 4문제 중 3문제를 맞혔고"), else the score

    def score(self, total: int) -> dict[str, float]:
        """As right answers of ``total`` (a count of wrong ones taken from its whole, or from
        ``total``); empty when it cannot be a score ("12/1", "130%", 12 of 10 right)."""
        whole, wrong = total if self.whole is None else self.whole, self.counts == WRONG
        right = whole - self.part if wrong and self.part is not None else self.part
        percent = 100 - self.percent if wrong and self.percent is not None else self.percent
        pairs = {"right": right, "total": self.whole, "percent": percent}.items()
        said = {key: value for key, value in pairs if value is not None}
        sound = 0 <= said.get("right", 0) <= whole and 0 <= said.get("percent", 0) <= 100
        return said if sound and whole > 0 else {}


@dataclass(frozen=True)
class Reading:
    """The score and tag figures it states, the times (seconds, and the unit they were
    stated in), the questions it names and those it says were missed."""

    figures: list[Figure]
    times: list[tuple[float, int]]
    named: set[int]
    missed: set[int]


def _tokens(text: str) -> list[Morpheme]:
    """The morphemes, with each number one ``SN``: "66.7" (MeCab parts it at the point), a
    native numeral before a counter ("일곱 문제" is 7)."""
    found: list[Morpheme] = []
    for m in morphemes(text):
        last = found[-1] if found else None
        digits = m.tag == "SN" or (m.surface, m.tag) == (".", "SY")  # not the sentence's SF
        if last and last.tag == "SN" and last.end == m.start and digits:
            found[-1] = dataclasses.replace(last, surface=last.surface + m.surface, end=m.end)
            continue
        if last and m.lemma in _COUNTER and (value := native_number(last.surface)) is not None:
            found[-1] = dataclasses.replace(last, tag="SN", surface=str(value))
        found.append(m)
    return found


def _number(ts: list[Morpheme], k: int, names: set[int]) -> float | None:
    m = ts[k] if k < len(ts) and k not in names else None
    if m is None or m.tag != "SN" or not m.surface.replace(".", "", 1).isdigit():
        return None
    return float(m.surface) if "." in m.surface else int(m.surface)


def _words(ts: list[Morpheme], k: int) -> str:
    return ts[k].lemma.lower() if 0 <= k < len(ts) else ""


def _figure(ts: list[Morpheme], i: int, names: set[int]) -> tuple[int, Figure | None]:
    """The figure at ``ts[i]`` and the index after it: "70%", "7/10", "7 (out) of 10",
    "10문제 중 7문제", "3문제", "3 (wrong)", each fraction or count with a "(70%)" after it."""
    first = _number(ts, i, names)
    if first is None:
        return i + 1, None
    word = lambda k: _words(ts, k)  # noqa: E731
    j, part, whole = i + 1, first, None
    if word(j).startswith("%") or word(j) in ("퍼센트", "percent"):
        return j + 1, Figure(None, None, first, 0)
    of = j + (word(j) == "out")
    of += word(of) == "of"
    of += of > j and word(of) == "the"
    if word(j) == "/" and (whole := _number(ts, j + 1, names)) is not None:
        j += 2
    elif of > j and (whole := _number(ts, of, names)) is not None:
        j = of + 1
    elif word(j) in _COUNTER and word(j + 1) == "중":
        k = j + 2 + (word(j + 2) == "에서")
        if (second := _number(ts, k, names)) is None:
            return i + 1, None
        part, whole, j = second, first, k + 1 + (word(k + 1) in _COUNTER)
    elif word(j) in _COUNTER:
        j += 1
    elif j < len(ts) and ts[j].tag not in ("SL", "SF", "SC", "SY", "SSO", "SSC"):
        return i + 1, None  # "3번", "3과": no count
    percent = None
    if word(j) == "(" and (percent := _number(ts, j + 1, names)) is not None:
        if not word(j + 2).startswith("%"):
            return i + 1, None
        j += 3
    return j, Figure(part, whole, percent, 0)


def _duration(ts: list[Morpheme], i: int, names: set[int]) -> tuple[int, float, int]:
    """The time at ``ts[i]`` ("5분 12초", "5 minutes and 12 seconds"): the index after it, its
    seconds and its smallest unit; ``(i, 0, 0)`` when there is none."""
    j, seconds, unit = i, 0.0, 0
    while (value := _number(ts, j, names)) is not None and _words(ts, j + 1) in _UNITS:
        unit = _UNITS[_words(ts, j + 1)]
        seconds, j = seconds + value * unit, j + 2
        j += _words(ts, j) == "and" and _words(ts, j + 2) in _UNITS
    return j, seconds, unit


def _meaning(ts: list[Morpheme], k: int) -> int:
    """RIGHT or WRONG as ``ts[k]`` says (turned by 못, 안, not before it or -지 못하/않 after
    it), 0 when it says neither."""
    word = _words(ts, k) if ts[k].tag in ("VV", "VA", "NNG", "SL") else ""
    sign = RIGHT if word in _RIGHT else WRONG if word in _WRONG else 0
    turned = _words(ts, k - 1) in _NOT
    turned |= _words(ts, k + 1) == "지" and _words(ts, k + 2) in ("못하", "않")
    return -sign if turned else sign


def _counts(ts: list[Morpheme], i: int, j: int) -> int:
    """What the figure at ``ts[i:j]`` counts: the word after it says, else the one before,
    with only glue between."""
    for steps in (range(j, len(ts)), range(i - 1, -1, -1)):
        for k in steps:
            if sign := _meaning(ts, k):
                return sign
            if not (ts[k].tag[0] in "JE" or ts[k].tag in _GLUE_TAGS or _words(ts, k) in _GLUE):
                break
    return 0


def _run(ts: list[Morpheme], i: int) -> tuple[list[int], list[int]]:
    """The numbers of a list or range from ``ts[i]`` ("3, 5번", "8~10", "Q3, Q5") and the
    indices of the last one's place and of the token after the run."""
    values: list[int] = []
    k, ranged, last = i, False, i
    while isinstance(value := _number(ts, k, set()), int) and _words(ts, k + 1) != "/":
        low = values[-1] if ranged and values and values[-1] < value <= values[-1] + 100 else 0
        values += range(low + 1, value + 1) if low else [value]
        last, k = k, k + 1 + (_words(ts, k + 1) == "번")
        if _words(ts, k) not in _LIST | _RANGE:
            break
        ranged = _words(ts, k) in _RANGE
        k += 1 + (_words(ts, k + 1) in _LIST)  # ", and"
        k += _words(ts, k) in _PREFIX  # "Q3, Q5", "문제 3과 문제 5"
    return values, [last, k]


def _names(ts: list[Morpheme]) -> tuple[set[int], set[int], set[int]]:
    """The questions a clause names explicitly ("3번 문제", "Question 3") and as a bare "3번은"
    (번 and a particle), and the indices of their numbers (no figures)."""
    explicit, bare, used = set[int](), set[int](), set[int]()
    i = 0
    while i < len(ts):
        values, (last, after) = _run(ts, i)
        before, beon, then = _words(ts, i - 1), _words(ts, last + 1), last + 2
        prefixed = before in _PREFIX and beon != "개"  # not "문제 3개"
        if values and (prefixed or (beon == "번" and _words(ts, then) in ("문제", "문항"))):
            explicit |= set(values)
        elif values and beon == "번" and (then >= len(ts) or ts[then].tag[0] in "JS"):
            bare |= set(values)  # not "10번 반복", "2번 연속", "3번째", "2번 더"
        else:
            i += 1
            continue
        used |= set(range(i, after))
        i = after
    return explicit, bare, used


def _clauses(text: str) -> list[list[Morpheme]]:
    """Its clauses: sentences, parted where a connective (-고, -지만…) or 반면, but… joins
    two."""
    found: list[list[Morpheme]] = []
    for sentence in re.split(r"(?<=[.!?。])\s+|\n", text):
        found.append([])
        for m in _tokens(sentence):
            if m.lemma.lower() in _BETWEEN:
                found.append([])
                continue
            found[-1].append(m)
            if any(tag == "EC" and form in _CLAUSE_END for form, tag in m.parts):
                found.append([])
    return [clause for clause in found if clause]


def read(text: str, tags: Iterable[str] = ()) -> Reading:
    """The figures ``text`` states (of the score, or of one of ``tags`` named before them in
    their clause), its times, and the questions it names and says were missed."""
    figures: list[Figure] = []
    times: list[tuple[float, int]] = []
    named, missed = set[int](), set[int]()
    words = {tag: [m.lemma.lower() for m in morphemes(tag)] for tag in tags}
    # A tag named with the reader's own words ("문제", "정답") would claim every score.
    words = {tag: name for tag, name in words.items() if not set(name) <= _OWN_WORDS}
    for ts in _clauses(text):
        lemmas = [m.lemma.lower() for m in ts]
        marks = [
            (k, tag)
            for k in range(len(ts))
            for tag, name in words.items()
            if lemmas[k : k + len(name)] == name
        ]
        explicit, bare, used = _names(ts)
        if explicit or any(m.lemma.lower() in _CHOOSE for m in ts):
            bare = set()  # "3번 문제: 2번을 골랐지만": the bare one is a choice
        named |= explicit | bare
        if any(_meaning(ts, k) == WRONG for k in range(len(ts))):
            missed |= explicit | bare
        i = len(ts) if _COMPARED & {*lemmas, *(m.surface for m in ts)} else 0  # 대부분: 대
        spent = bool(_SPENT & set(lemmas)) and not _ADVICE & set(lemmas)
        while i < len(ts):
            j, seconds, unit = _duration(ts, i, used)
            if j > i:
                times += [(seconds, unit)] if spent else []
                i = j
                continue
            j, figure = _figure(ts, i, used)
            last = [(k, tag) for k, tag in marks if k < i][-1:]
            about = last[0][1] if last and not _OVERALL & set(lemmas[last[0][0] : i]) else ""
            if figure and (counts := _counts(ts, i, j)):
                figures.append(dataclasses.replace(figure, counts=counts, about=about))
            i = j
    return Reading(figures, times, named, missed)
