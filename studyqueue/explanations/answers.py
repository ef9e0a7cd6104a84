"""The answer an explanation states, read from its text and compared with the question's key,
with no extra LLM call (the grammar: docs/reference/quality.md, "The answer line"). A reply it
cannot read is ``Verdict.UNREAD``, never an agreement. Pure text: no database."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from studyqueue.explanations import words


class Verdict(StrEnum):
    """How the stated answer relates to the key."""

    AGREES = "agrees"  # it names the key
    DIFFERS = "differs"  # it names another answer
    UNREAD = "unread"  # no plain statement the parser can read (see the module's grammar)
    NO_KEY = "no_key"  # the question has no key: nothing to compare with


@dataclass(frozen=True)
class Agreement:
    """What ``compare`` found: the statement as written ("" when none) and the verdict."""

    stated: str
    verdict: Verdict


# Only the reply's end is read: the answer line closes it, and a reply may be megabytes
# (LLM_MAX_REPLY_BYTES) of which every "정답" would be a statement to resolve.
TAIL_CHARS = 8000
LAST_STATEMENTS = 64  # the last ones weighed; more in 8,000 characters is no explanation
STATEMENT_CHARS = 300
BEFORE_CHARS = 120

# What a statement resolves to: a choice (1-based), something that is no choice, two
# answers at once, or nothing recognisable (a sentence that only uses the word "answer").
_JUNK, _OTHER, _AMBIGUOUS = "junk", "other", "ambiguous"
_Resolved = int | str

_CIRCLED = {
    **{chr(0x2460 + i): i + 1 for i in range(20)},  # ①..⑳
    **{chr(0x2776 + i): i + 1 for i in range(10)},  # ❶..❿
    **{chr(0x2780 + i): i + 1 for i in range(10)},  # ➀..➉
    **{chr(0x278A + i): i + 1 for i in range(10)},  # ➊..➓
}
_CIRCLED_CLASS = "".join(_CIRCLED)

# "Answer:", "The correct answer is", "Final answer -", "The best option is"…
# A blank within a line: no label reaches across a line break ("… is right\nAnswer: ②").
_SP = r"[^\S\n]"
_EN_LABEL = re.compile(
    rf"\b(?:(?:the{_SP}+)?(?:(?:correct|right|final|best|true){_SP}+)?answer"
    rf"|(?:the{_SP}+)?(?:correct|right|final|best){_SP}+(?:option|choice))"
    rf"{_SP}*(?:is|(?:would|must|should|will){_SP}+be|[:\uff1a=\-\u2013\u2014→]|(?=[ \t]*\n))",
    re.IGNORECASE,
)


def _word_end(tokens: Sequence[words.Morpheme], i: int) -> int:
    """Where the word (어절) of ``tokens[i]`` ends: the next blank or punctuation."""
    for end in range(i + 1, len(tokens)):
        if tokens[end].start > tokens[end - 1].end or tokens[end].tag[0] == "S":
            return end
    return len(tokens)


def _answer_noun(tokens: Sequence[words.Morpheme], i: int) -> bool:
    """정답, 해답 or 답 as a word: not 정답률, 오답률 (a suffix, 률/XSN, follows), 대답, 답변,
    오답 (other words), nor the suffix of 학생답다. MeCab may tag 정답 or 답 as an adjective
    ("답은 B", "③이지만 정답은"): the form counts."""
    word = tokens[i]
    return word.surface in ("정답", "해답", "답") and word.tag != "XSA" and not _suffixed(tokens, i)


def _suffixed(tokens: Sequence[words.Morpheme], i: int) -> bool:
    """A suffix makes ``tokens[i]`` another word: 정답률, 오답률 (률/XSN)."""
    after = tokens[i + 1 : i + 2]
    return bool(after) and after[0].tag == "XSN" and after[0].start == tokens[i].end


def _ko_label(reply: str, tokens: Sequence[words.Morpheme], i: int) -> int:
    """A label: "최종 정답", "정답은", "답:", "정답 = ②", "정답 ②" or "정답" ending its line (the
    answer below it); not "정답 해설" (a heading), "대답은", "정답률은" (other words)."""
    at = i + (tokens[i].surface == "최종")
    if at >= len(tokens) or not _answer_noun(tokens, at):
        return 0
    # A particle or a mark after it ("정답은", "정답:"); not the copula of 정답이다 (VCP).
    mark = tokens[at + 1].surface if at + 1 < len(tokens) and tokens[at + 1].tag[0] in "JES" else ""
    took = len(mark) == 1 and mark in "은는이가:\uff1a=→-\u2013"
    return at - i + 1 + took if took or _LABEL_END.match(reply, tokens[at].end) else 0


_LABEL_END = re.compile(rf"{_SP}+(?=[^\s가-힣])|{_SP}*(?=\n)")


def _ko_after(tokens: Sequence[words.Morpheme], i: int) -> int:
    """ "②번이 정답입니다", "서울이 정답": 정답 ending its word bare or with a copula (not
    정답인, 정답으로), with the particle before it."""
    at = i + (tokens[i].surface in ("이", "가", "은", "는") and tokens[i].tag.startswith("J"))
    at += at < len(tokens) and tokens[at].surface == "최종"
    if at >= len(tokens) or tokens[at].surface != "정답" or not _answer_noun(tokens, at):
        return 0
    end = _word_end(tokens, at)
    copula = "".join(token.surface for token in tokens[at + 1 : end])
    return end - i if copula in ("", "이다", "입니다", "이에요", "예요", "이야", "임") else 0


# The answer named before the label: "②번이 정답입니다", "(B) Seoul is the correct answer".
_KO_AFTER = words.Words(_ko_after)
_EN_AFTER = re.compile(
    rf"{_SP}+(?:is|was){_SP}+(?:the{_SP}+)?(?:correct|right|final|best){_SP}+"
    r"(?:answer|option|choice)\b",
    re.IGNORECASE,
)
# Where a clause before an "after" label starts: the answer is the clause's last words.
_CLAUSE_START = re.compile(
    r".*(?:[.,;:!?。]\s|\b(?:so|thus|therefore|hence)\b|따라서|그러므로|그래서|즉)", re.IGNORECASE
)

_FILLER = re.compile(
    r"^(?:(?:clearly|simply|definitely|therefore|thus|so|option|choice|number|no\.|"
    r"letter|바로|보기|선택지|번호|결국|따라서)\s*)+",
    re.IGNORECASE,
)
# "not 1 but 3", "①이 아니라 ③", "①이 아닌 ③": what comes after the turn is the answer.
_KO_TURN = re.compile(r"(?:이|가)?\s*(?:아니(?:라|고|며)|아닌)\s*")
_EN_TURN = re.compile(r"^not\b.*?\b(?:but(?:\s+rather)?|rather|it\s+is|it's)\s+", re.IGNORECASE)
_EN_NOT = re.compile(r"^not\b", re.IGNORECASE)
_MARKER = re.compile(
    rf"^(?:[(\uff08\[【]\s*(?P<paren>\d{{1,2}}|[A-Za-z]|[{_CIRCLED_CLASS}])\s*[)\uff09\]】]"
    rf"|(?P<circled>[{_CIRCLED_CLASS}])"
    r"|(?P<number>\d{1,2})(?P<beon>\s*번)?(?![\d,.]\d|\s*[%/])"
    r"|(?P<letter>[A-Za-z])(?P<close>[).:])?(?![A-Za-z0-9'\u2019]))"
)
# What joins two answers: "and", "or", a comma, "또는", "와"…
_JOIN = r"[,;/&+|~·・、]|(?i:and|or)\b|및|또는|혹은|이나|이랑|랑|하고|와|과|나"
# What may join two answers named by their text: "Seoul or Busan", "서울이나 부산", "서울 부산".
_AND = re.compile(rf"^[\s(\[]*(?:(?P<word>{_JOIN})[\s(\[]*)?")
# A second choice right after the first: "B and C", "B C", "B (or C)", "②③", "②번과 ③번".
_SECOND = re.compile(
    rf"^(?:\s*번)?[\s(\[【]*(?:(?:{_JOIN})[\s(\[【]*)?"
    rf"(?=[{_CIRCLED_CLASS}]|\d{{1,2}}(?![\d,.]\d|\s*[%/])|[A-Z](?![A-Za-z0-9'\u2019])"
    r"|(?<=[(\[【])[a-z]\s*[)\]】])"
)
# Endings of a Korean statement ("서울입니다", "②번이다"): not part of the answer.
_COPULA = re.compile(r"\s*(?:번)?\s*(?:입니다|이에요|예요|이다|이야|임)?\s*[.!。]*\s*$")
_EDGE = " \t\"'\u201c\u201d\u2018\u2019「」『』.,;:!?。·-\u2013\u2014*_`$"
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+|;|\s+[-\u2013\u2014]\s+")

# Korean words that negate (shared with the hider), and those that doubt: 아니다, 않다, 틀리다,
# 오답, 없다, 아마, 겠, 지만, 생각, 라고 (reported)… as words, not 틀림없이 ("certainly").
NOT_WORDS = frozenset(["않", "아니", "아님", "못", "못하", "틀리", "틀림"])
_DOUBT_WORDS = (
    NOT_WORDS
    | {"오답", "잘못", "없", "제외", "소거", "함정", "듯", "듯하", "아마", "혹시", "겠"}
    | {"지만", "가능", "추정", "추측", "보이", "생각", "모르", "애매", "글쎄", "라고", "다고"}
    | {"라는", "냐고", "만약", "만일", "흔히", "흔하", "착각", "오해", "ᆯ지", "ᆯ까"}
)


def _doubt(tokens: Sequence[words.Morpheme], i: int) -> int:
    """A Korean word that doubts a statement (오답, not 오답률), or a phrase: 것 같다, 수도 있다."""
    hedge = "".join(token.surface for token in tokens[i : i + 3]).startswith(("것같", "수도있"))
    doubts = any(form in _DOUBT_WORDS for form, _ in tokens[i].parts) and not _suffixed(tokens, i)
    return int(hedge or doubts)


# What makes a statement state no answer (besides a question mark): a word that negates,
# hedges or reports it, or makes it another's answer ("a trap"). When in doubt, unread.
_DOUBT_EN = re.compile(
    r"(?i)n['\u2019]t\b|[\u2717\u2718\u274c\u274e\U0001f6ab]"
    r"|\b(?:not|no|never|none|isnt|neither|nor|incorrect|wrong|false|except|excluded|"
    r"eliminated|rejected|ruled|trap|distractor|decoy|"
    r"maybe|perhaps|probably|possibly|presumably|apparently|supposedly|likely|unlikely|"
    r"might|may|could|seems?|appears?|unclear|uncertain|doubt|doubtful|"
    r"guess|think|thinks|thought|believes?|believed|suppose[sd]?|assume[sd]?|unsure|"
    r"if|unless|whether|but|however|although|though|either|both|also|"
    r"say|says|said|claims?|claimed|argues?|argued|suggests?|suggested|"
    r"common|commonly|typical|typically|popular|tempting|often|"
    r"many|some|students?|people|others?|another|alternative)\b"
)
_DOUBT = words.Words(_doubt, _DOUBT_EN)
# Words before a label that leave it the writer's own: "So the answer is", "잠깐, 다시 보니 정답은".
_LEAD_IN = re.compile(
    r"(?:[\s,:;>#\-\u2013\u2014\u2022]+"
    r"|(?:so|thus|therefore|hence|finally|actually|wait|correction|then|overall"
    r"|in\s+(?:conclusion|summary|short)|on\s+(?:second\s+thought|reflection)"
    r"|따라서|그러므로|그래서|즉|결국|결론적으로|최종적으로|정리하면|요약하면|아니|잠깐"
    r"|다시\s*[가-힣]+)(?![A-Za-z가-힣]))*",
    re.IGNORECASE,
)
# MeCab reads "②번이" as one noun, 번이: its particle is not the answer's.
_GLUED = re.compile(rf"(?<=[{_CIRCLED_CLASS}]번)[이가은는]{_SP}*$")
_CONCEDED = [["지만"], ["but"], ["however"], ["although"], ["though"]]
_SENTENCE_START = re.compile(r".*[.!?。]\s")
# The next line with words, past blank lines and Markdown rules ("**정답**", "---", "②").
_NEXT_LINE = re.compile(r"\n(?:[ \t]*(?:[-*_=][ \t]*){3,}\n|\s)*([^\n]+)")
_LATIN_AFTER = re.compile(r"\s+[A-Za-z]")
_NOT_CIRCLED = re.compile(rf"[^{_CIRCLED_CLASS}]+")
_TEX_WRAP = re.compile(r"\\(?:boxed|fbox|text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_TEX_DELIMITER = re.compile(r"\\[()\[\]]")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>\n]{0,80}>")


def _markdown_off(text: str) -> str:
    """Emphasis, code marks, HTML tags and LaTeX off: ``**Answer:** 2``, ``$\\boxed{B}$``."""
    text = _TEX_WRAP.sub(r"\1", _TEX_WRAP.sub(r"\1", text))  # twice: \boxed{\text{B}}
    text = _HTML_TAG.sub("", _TEX_DELIMITER.sub(" ", text))
    return re.sub(r"\*+|__|`+|\$", "", text)


def _fold(text: str) -> str:
    """Compatibility forms folded (full-width, ``⑵``) but not circled numbers (``②`` no ``2``)."""
    return _NOT_CIRCLED.sub(lambda part: unicodedata.normalize("NFKC", part[0]), text)


def _norm(text: str) -> str:
    """Compatibility forms folded (full-width letters), case folded, blanks collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(text.split()).strip(_EDGE)


def _starts_with(text: str, prefix: str) -> bool:
    """``text`` starts with ``prefix`` as a word; Korean particles may follow ("서울입니다")."""
    if not prefix or not text.startswith(prefix):
        return False
    return not _latin_word(text[len(prefix) : len(prefix) + 1])


def _latin_word(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _choice_by_text(text: str, choices: Sequence[str]) -> _Resolved:
    """The choice a statement starts with (the longest, for "서울" and "서울특별시"), else
    the one choice its first sentence mentions; ``_JUNK`` for none, ``_AMBIGUOUS`` for two."""
    said = _norm(text)
    names = [_norm(choice) for choice in choices]
    starts = [(len(name), i) for i, name in enumerate(names) if _starts_with(said, name)]
    if starts:
        longest = max(starts)[0]
        found = {names[i] for length, i in starts if length == longest}
        if len(found) != 1 or names.count(found.pop()) != 1:
            return _AMBIGUOUS
        number = max(starts)[1] + 1
        joined = _AND.match(said[longest:])
        after = said[longest + joined.end() :] if joined else ""
        if joined and joined["word"]:
            other = resolve(after, choices)  # "Seoul or Busan", "Seoul and ①"
        else:  # "서울 부산", "Seoul (B)": only a choice right after it
            marker = _MARKER.match(after)
            by_name = [i + 1 for i, name in enumerate(names) if _starts_with(after, name)]
            other = _marker(marker, choices) if marker else by_name[0] if by_name else _JUNK
        return number if other in (number, _JUNK, _OTHER) else _AMBIGUOUS
    sentence = _norm(_SENTENCE_END.split(text, maxsplit=1)[0])
    inside = {i for i, name in enumerate(names) if name and _mentions(sentence, name)}
    # A choice inside a longer one ("Seoul" in "Seoul Tower") is that one.
    inside = {i for i in inside if not any(j != i and names[i] in names[j] for j in inside)}
    if len(inside) == 1:
        return inside.pop() + 1
    return _AMBIGUOUS if inside else _JUNK


def _mentions(sentence: str, name: str) -> bool:
    starts = (m.start() for m in re.finditer(re.escape(name), sentence))
    return any(
        _starts_with(sentence[at:], name) and not _latin_word(sentence[at - 1 : at])
        for at in starts
    )


def _marker(match: re.Match[str], choices: Sequence[str]) -> _Resolved:
    """The choice a number, circled number or letter names (``_OTHER`` out of range)."""
    count = len(choices)
    token = match["paren"] or match["number"] or match["letter"]
    if match["circled"] or token in _CIRCLED:
        number = _CIRCLED[match["circled"] or token]
    elif token.isdigit():
        number = int(token)
        as_text = [i + 1 for i, choice in enumerate(choices) if _norm(choice) == _norm(token)]
        plain = match["number"] is not None and match["beon"] is None
        if as_text and (number > count or (plain and as_text != [number])):
            # "4" among the choices "3", "4": the choice's text, or (in range) both readings.
            return as_text[0] if number > count and len(as_text) == 1 else _AMBIGUOUS
    else:
        word = not match["close"] and _LATIN_AFTER.match(match.string, match.end())
        if match["letter"] and token.islower() and word:
            return _JUNK  # "a city": the article, not the letter of a choice ("a입니다" is)
        number = ord(token.upper()) - ord("A") + 1
    return number if 1 <= number <= count else _OTHER


def _answer_part(statement: str) -> str:
    """The part of a statement naming the answer (after "not … but", "…이 아니라"), or ""."""
    said = _FILLER.sub("", statement.strip(_EDGE))
    turned = _EN_TURN.sub("", said)
    if turned == said and _EN_NOT.match(said):
        return ""
    parts = _KO_TURN.split(turned)
    return _FILLER.sub("", parts[-1].strip(_EDGE)) if len(parts) > 1 else turned


def resolve(statement: str, choices: Sequence[str]) -> _Resolved:
    """What a statement names: a choice number (1-based), ``"other"`` (an answer that is no
    choice), ``"ambiguous"`` (two answers at once) or ``"junk"`` (nothing recognisable)."""
    said = _answer_part(_fold(statement))
    if not said:
        return _JUNK
    if not choices:
        return _OTHER
    match = _MARKER.match(said)
    if match is None:
        return _choice_by_text(said, choices)
    found = _marker(match, choices)
    if found in (_JUNK, _AMBIGUOUS):
        return found if found == _AMBIGUOUS else _choice_by_text(said, choices)
    rest = said[match.end() :]
    second = _SECOND.match(rest)
    also = _MARKER.match(rest[second.end() :]) if second else None
    if also and _marker(also, choices) not in (found, _JUNK):
        return _AMBIGUOUS  # "② ③", "B and C": two answers
    rest = rest.strip(_EDGE + "()\uff08\uff09[]")
    named = _choice_by_text(rest, choices) if rest else _JUNK
    if isinstance(named, int) and isinstance(found, int) and named != found:
        return _AMBIGUOUS  # "2 (Rome)" when Rome is choice 3
    return found


def _doubted(words: str, names: Sequence[str]) -> bool:
    """The words around an answer doubt it (``_DOUBT``), the ``names``' own words left out."""
    said = _norm(words)
    for name in names:
        if (name := _norm(name)) and name in said:
            said = re.sub(rf"(?<![0-9a-z]){re.escape(name)}(?![0-9a-z])", " ", said)
    return _DOUBT.search(said) is not None


@dataclass(frozen=True)
class _Statement:
    at: int
    text: str  # what names the answer: after the label (its line), or before it (its clause)
    context: str = ""  # the rest of its sentence, which may doubt it (none when it opens one)
    line: bool = False  # the label opens its line: the fixed form, whatever follows is meant
    opens: bool = False  # the label opens its sentence: the writer's own statement


@dataclass(frozen=True)
class _Reading:
    statement: _Statement
    names: _Resolved  # what the statement names, doubted or not
    answer: str  # the words naming it
    doubted: bool  # negated, hedged, asked or reported: it states no answer


_LINE_START = " \t#>-•"


def _statements(reply: str) -> list[_Statement]:
    """The last ``LAST_STATEMENTS`` places the reply states an answer, in order: after a
    label (to its line's end, or the next line) or before one (the clause's last words)."""
    korean = words.Words(lambda tokens, i: _ko_label(reply, tokens, i))
    found = [(m.start(), True, m) for label in (_EN_LABEL, korean) for m in label.finditer(reply)]
    found += [
        (m.start(), False, m) for label in (_EN_AFTER, _KO_AFTER) for m in label.finditer(reply)
    ]
    statements = []
    for at, after_label, match in sorted(found, key=lambda item: item[0])[-LAST_STATEMENTS:]:
        start = reply.rfind("\n", 0, at) + 1
        before = reply[max(start, at - BEFORE_CHARS) : at]
        clause = _CLAUSE_START.match(before)
        end = reply.find("\n", match.end())
        rest = reply[match.end() : end if end >= 0 else len(reply)][:STATEMENT_CHARS]
        # The sentence's words before the label: they may report or doubt the statement.
        sentence = before[opened.end() :] if (opened := _SENTENCE_START.match(before)) else before
        if not after_label:
            # "(B) Seoul is the correct answer": the clause's last words before the label.
            said = _GLUED.sub("", before[clause.end() :] if clause else before)
            context = f"{sentence[: len(sentence) - len(said)]} {_SENTENCE_END.split(rest, 1)[0]}"
            statements.append(_Statement(at, said, context))
            continue
        opens = _LEAD_IN.fullmatch(sentence) is not None
        line = at - start < 8 and not before.strip(_LINE_START)
        if line and end >= 0 and not rest.strip(_EDGE) and (below := _NEXT_LINE.match(reply, end)):
            rest = below[1][:STATEMENT_CHARS]  # "**정답:**" and the answer on the next line
        # A clause conceded before the label doubts nothing else: "③이지만 정답은 ②".
        conceded = [m[0].casefold() for m in _DOUBT.finditer(sentence)] in _CONCEDED
        statements.append(_Statement(at, rest, "" if opens or conceded else sentence, line, opens))
    return statements


def _reading(statement: _Statement, choices: Sequence[str], names: Sequence[str]) -> _Reading:
    """What a statement names, and whether it is doubted (see ``_DOUBT``)."""
    first = _SENTENCE_END.split(statement.text, maxsplit=1)[0]
    said = _FILLER.sub("", _fold(first).strip(_EDGE))
    only_not = _EN_NOT.match(said) and not _EN_TURN.match(said)  # "not 1": what it is not
    text = _EN_NOT.sub("", said, count=1) if only_not else statement.text
    named = resolve(text, choices)
    answer = _answer_part(text)
    if named == _JUNK and statement.line and answer:
        named = _OTHER  # "Answer: Tokyo": an answer that is none of the choices
    # Doubts are read in the statement's sentence, or on an answer line in all of it.
    region = statement.text if statement.line else first
    asked = "?" in _fold(f"{statement.context} {region}")  # "Paris is the correct answer?"
    words = f"{statement.context} {_answer_part(region)}"
    doubted = bool(only_not) or asked or _doubted(words, [*choices, *names])
    return _Reading(statement, named, answer, doubted)


def _same(one: _Reading, other: _Reading) -> bool:
    """Two statements name the same answer: one choice, or (no choice) the same text."""
    if isinstance(one.names, int) or isinstance(other.names, int):
        return one.names == other.names
    if _AMBIGUOUS in (one.names, other.names):
        return False
    return same_text(one.answer, other.answer) or same_text(other.answer, one.answer)


def read(reply: str, choices: Sequence[str], names: Sequence[str] = ()) -> tuple[str, _Resolved]:
    """The statement of the answer, as written, and what it names (``("", "junk")``: none
    read); ``names`` (the key) are, like the choices, words that never doubt it."""
    readings = [
        _reading(statement, choices, names)
        for statement in _statements(_markdown_off(reply[-TAIL_CHARS:]))
    ]
    said = [reading for reading in readings if reading.names != _JUNK]
    # An opening label outranks an answer named inside a sentence; among either, the last
    # counts (the model corrected itself).
    opening = [reading for reading in said if reading.statement.opens]
    plain = opening[-1:] or [reading for reading in said if not reading.doubted][-1:]
    if not plain or plain[0].doubted:
        return "", _JUNK
    chosen = plain[0]
    stated = " ".join(chosen.statement.text.split()).strip(_EDGE)
    for later in said[said.index(chosen) + 1 :]:
        # Another answer stated after it, or this one doubted: the reply contradicts itself.
        contradicts = later.doubted if _same(later, chosen) else not later.doubted
        if contradicts:
            return stated, _AMBIGUOUS
    return stated, chosen.names


def key_choice(key: str, choices: Sequence[str]) -> int | None:
    """The choice (1-based) a key names: its text first, then its number or letter."""
    said = _norm(key)
    exact = [i + 1 for i, choice in enumerate(choices) if _norm(choice) == said]
    if len(exact) == 1:
        return exact[0]
    found = resolve(key, choices) if said and not exact else None
    return found if isinstance(found, int) else None


def same_text(stated: str, key: str) -> bool:
    """An open answer is the key, or the key with a Korean ending ("서울입니다", "서울특별시")."""
    said = _norm(_COPULA.sub("", _SENTENCE_END.split(stated, maxsplit=1)[0]))
    wanted = _norm(key)
    ending = said[len(wanted) :].strip(_EDGE)
    return said == wanted or (
        _starts_with(said, wanted) and all("\uac00" <= char <= "\ud7a3" for char in ending)
    )


def compare(reply: str, choices: Sequence[str], key: str) -> Agreement:
    """Compare the answer a reply states with the key (a choice's text, number or letter)."""
    stated, resolved = read(reply, choices, [key])
    if not key.strip():
        return Agreement(stated, Verdict.NO_KEY)
    if resolved in (_JUNK, _AMBIGUOUS):
        return Agreement(stated, Verdict.UNREAD)
    wanted = key_choice(key, choices) if choices else None
    if wanted is not None:
        return Agreement(stated, Verdict.AGREES if resolved == wanted else Verdict.DIFFERS)
    said = choices[resolved - 1] if isinstance(resolved, int) else _answer_part(stated)
    return Agreement(stated, Verdict.AGREES if same_text(said, key) else Verdict.DIFFERS)


SHORT_REPLY_CHARS = 1000  # the checks ask for at most 16 tokens
# A reply that is the answer alone: "2", "(B)", "③", "2번", "B." (not "2?", "2 (maybe)").
_ALONE = re.compile(
    rf"^[(\[]?\s*(?:\d{{1,2}}|[A-Za-z]|[{_CIRCLED_CLASS}])\s*[)\]]?\s*(?:번)?\s*[.。]?$"
)


def choice_named(reply: str, choices: Sequence[str]) -> int | None:
    """The choice (1-based) a short reply names ("Answer: 2", "(B)", "Seoul"), or None; stricter
    than ``read``: two choices on two lines, or a reply far longer than asked for, name none."""
    if len(reply) > SHORT_REPLY_CHARS:
        return None
    lines = [line for line in reply.splitlines() if line.strip()]
    if len(lines) > 1:
        named = {choice_named(line, choices) for line in lines} - {None}
        return named.pop() if len(named) == 1 else None
    _, resolved = read(reply, choices)
    if isinstance(resolved, int):
        return resolved
    bare = _fold(reply).strip()
    if _ALONE.match(bare) or any(_norm(bare) == _norm(choice) for choice in choices):
        alone = resolve(bare, choices)
        if isinstance(alone, int):
            return alone
    return None
