"""Korean read as words: the morphemes of a text (MeCab with the mecab-ko dictionary), each
with its tag, its dictionary form and where it stands, so that 들어맞다 is not 맞다, 정답률 is not
정답 and 일곱 is a number. Pure text: no database."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import mecab_ko


@dataclass(frozen=True)
class Morpheme:
    """One word piece: ``surface`` as written at ``text[start:end]``, its tag (``VV``,
    ``NNG``…, the first one of an inflected form) and its pieces' dictionary forms with their
    tags: 틀렸 is ``(("틀리", "VV"), ("었", "EP"))``."""

    surface: str
    tag: str
    parts: tuple[tuple[str, str], ...]
    start: int
    end: int

    @property
    def lemma(self) -> str:
        """The dictionary form of its first piece: 맞히 for 맞혔, 들어맞 for 들어맞는."""
        return self.parts[0][0]

    def has(self, lemma: str, *tags: str) -> bool:
        """One of its pieces is ``lemma`` (with one of ``tags``, when given)."""
        return any(form == lemma and (not tags or tag in tags) for form, tag in self.parts)


# A MeCab tagger is not safe to share between threads (the verifier hides in a thread).
_lock = threading.Lock()


@functools.cache
def _tagger() -> mecab_ko.Tagger:
    return mecab_ko.Tagger()


def _parts(surface: str, tag: str, feature: list[str]) -> tuple[tuple[str, str], ...]:
    # An inflected or compound form lists its pieces in the 8th field: "맞히/VV/*+었/EP/*".
    if len(feature) > 7 and feature[7] != "*":
        pieces = (piece.split("/") for piece in feature[7].split("+"))
        return tuple((piece[0], piece[1]) for piece in pieces if len(piece) >= 2)
    return ((surface, tag.split("+")[0]),)


@functools.lru_cache(maxsize=4096)
def _analyse(text: str) -> tuple[Morpheme, ...]:
    with _lock:
        lines = _tagger().parse(text).splitlines()
    found: list[Morpheme] = []
    at = 0
    for line in lines:
        surface, _, rest = line.partition("\t")
        if not rest:
            continue  # EOS
        start = text.find(surface, at)
        if start < 0:
            continue  # a form MeCab changed: not in the text as written
        feature = rest.split(",")
        tag = feature[0].split("+")[0]
        at = start + len(surface)
        found.append(Morpheme(surface, tag, _parts(surface, tag, feature), start, at))
    return tuple(found)


@functools.lru_cache(maxsize=64)  # a reader tries several patterns on the same text
def morphemes(text: str) -> tuple[Morpheme, ...]:
    """The morphemes of ``text``, in order (MeCab reads one line at a time)."""
    if "\n" not in text:
        return _analyse(text)  # one line, read once: patterns over one sentence share it
    return tuple(
        Morpheme(m.surface, m.tag, m.parts, m.start + line.start(), m.end + line.start())
        for line in re.finditer(r"[^\n]+", text)
        for m in _analyse(line[0])
    )


@dataclass(frozen=True)
class Found:
    """Where a word pattern matched: the same reading as a ``re.Match``'s ``start``, ``end``
    and ``[0]``, so that a rule can weigh words and regular expressions alike."""

    text: str
    begin: int
    finish: int

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish

    def __getitem__(self, group: int) -> str:
        return self.text[self.begin : self.finish]


# A test on the morphemes at an index: how many morphemes from there it takes (0: none).
Rule = Callable[[tuple[Morpheme, ...], int], int]


@dataclass(frozen=True)
class Words:
    """A pattern over words: ``rule`` read at each morpheme, and, beside it, a regular
    expression for what is no Korean (English keeps its own rules)."""

    rule: Rule
    other: re.Pattern[str] | None = None

    def finditer(self, text: str) -> Iterator[Found | re.Match[str]]:
        found: list[Found | re.Match[str]] = []
        tokens = morphemes(text)
        i = 0
        while i < len(tokens):
            taken = self.rule(tokens, i)
            if taken:
                found.append(Found(text, tokens[i].start, tokens[i + taken - 1].end))
            i += max(taken, 1)
        if self.other is not None:
            found += self.other.finditer(text)
        return iter(sorted(found, key=lambda match: match.start()))

    def search(self, text: str) -> Found | re.Match[str] | None:
        return next(self.finditer(text), None)


# Korean native numerals (고유어 수사) as written before a counter: 세 문제, 열한 문제, 스무 개.
_NATIVE = ("한/하나", "두/둘", "세/셋/석", "네/넷", "다섯", "여섯", "일곱", "여덟", "아홉")
_UNITS = {word: value for value, words in enumerate(_NATIVE, 1) for word in words.split("/")}
_TENS = {"열": 10, "스물": 20, "스무": 20, "": 0}


def native_number(word: str) -> int | None:
    """The value of a Korean native numeral (일곱 7, 열 10, 열한 11, 스물두 22), or None."""
    for tens, value in _TENS.items():
        rest = word.removeprefix(tens)
        if word.startswith(tens) and (rest in _UNITS or (tens and not rest)):
            return value + _UNITS.get(rest, 0)
    return None
