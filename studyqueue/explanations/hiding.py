"""What the blind verifier may read of an explanation: its reasoning, every statement of the
answer hidden by sentence, then by clause (the grammar: docs/howto/checks.md, "What the
verifier sees"). ``blind`` adds why the verifier must not be asked. Pure text: no database."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from studyqueue.explanations import answers

_C = answers._CIRCLED_CLASS

# Words that make a sentence about *the answer*; not "대답", "답변", "오답" (a distractor called
# a wrong answer is reasoning about it) nor the verb "to answer".
_ANSWER_WORD = re.compile(
    r"정답|해답|(?<![가-힣])답(?:[은는이가을를으로의도만과와]|(?![가-힣]))"
    r"|(?<!\bto )\banswer(?:s|ed)?\b"
    r"|\b(?:correct|right|best|only|true)\s+(?:one|option|choice|pick|response|selection)\b",
    re.IGNORECASE,
)
# Telling the reader which choice to pick ("고르면 된다", "선택해야 한다", "choose B", "go with").
_PICK = re.compile(
    r"고르(?!게)|골라|골랐|고른다|고를"
    r"|(?<!자연)선택(?:하|한|할|해|했|합|을\s*하)|(?<![가-힣])택(?:하|한|해|할)"
    r"|\b(?:pick(?:s|ed)?|choos(?:e|es|ing)|chose|select|go(?:es)?\s+with|opt\s+for)\b",
    re.IGNORECASE,
)
# A mark that names a choice: "②", "2번", "(B)", "option B", "보기 ③", an ordinal, a capital
# letter as a sentence's subject ("D is right"), a demonstrative.
_REF = re.compile(
    rf"[{_C}]|(?<![\d.])\d{{1,2}}\s*번(?!째)|[(\uff08]\s*(?:\d{{1,2}}|[A-Za-z])\s*[)\uff09]"
    rf"|\b(?:option|choice|number|no\.)\s*[(\uff08]?\s*(?:\d{{1,2}}|[A-Za-z])\b"
    r"|(?:보기|선택지)\s*\d{1,2}(?!\d)"
    r"|(?:첫|두|세|네|다섯|여섯|일곱|여덟|아홉|열)\s*(?:번째|째)\s*(?:보기|선택지|항목|것|답)"
    r"|\b(?:first|second|third|fourth|fifth|sixth|last)\s+(?:option|choice|one|answer|item)\b"
    r"|(?<![A-Za-z0-9])[A-H](?:\)|(?=[가이는은를을로]|\s+(?:is|was|would|must|should|fits)\b))"
    r"|^\s*(?:\d{1,2}|[A-Ha-h])[.)](?=\s)"
    r"|\b(?:this|that|it)\b(?=\s+(?:is|was)\s)|이것|그것|이\s*보기|이\s*선택지",
    re.IGNORECASE,
)
# A verdict that a named choice is the right one: "맞다", "correct", "가장 적절하다". Not
# "옳다" ("②는 옳다" in a "옳지 않은 것은?" question is reasoning): see ``_TRUE``.
_RIGHT = re.compile(
    r"맞(?:다|습니다|아요|아|는다|음|는\s*(?:것|보기|선택)|을\s*것)"
    r"|가장\s*(?:적절|알맞|타당|정확|옳|적합|올바르|올바른|맞)"
    r"|\b(?:correct|right)\b|\bbest\s+(?:fits?|describes?|matches|answers)\b|\bthe\s+one\b",
    re.IGNORECASE,
)
_TRUE = re.compile(r"옳(?:다|습니다|음|아요)|(?:올바르|적절하|알맞)(?:다|습니다)")
_CONCLUSION = re.compile(
    r"^\W*(?:따라서|그러므로|그래서|결국|즉|결론적으로|그러니|so|thus|therefore|hence)\b",
    re.IGNORECASE,
)
# A negation in or right after a verdict ("맞는 것은 아니다", "isn't right") voids it.
_NEGATION = re.compile(r"않|아니|아닌|못|틀|\bnot\b|n['\u2019]t\b|\bnever\b|\bno\b", re.IGNORECASE)
# The question's own wording before the answer: "옳지 않은 것은 ③", "알맞은 설명은 ②번".
_WHICH_IS = re.compile(
    r"(?:옳|맞|틀|알맞|적절|바르|바른|올바|해당|아닌|않|거리가\s*먼|관계\s*없|관련\s*없)[가-힣]*"
    r"\s+(?:것|보기|선택지|설명|진술|내용|항목)\s*(?:은|는)\s*$"
)
# Marks that tick a choice as the answer ("② 칼슘 ✅", "(O)"): the mark goes, the line stays.
_TICK = re.compile(r"\s*(?:[\u2713\u2714\u2705\u2611\u2b55]|[(\uff08]\s*[O○◯]\s*[)\uff09])")
# A parenthesis or bracket inside a sentence: "(정답 ②)", "[answer B]".
_ASIDE = re.compile(
    r"\s*(?:\([^()\n]{0,80}\)|\uff08[^\uff08\uff09\n]{0,80}\uff09|\[[^\[\]\n]{0,80}\]|【[^【】\n]{0,80}】)"
)

# Where a sentence ends: after . ! ? 。 and a blank; not after a list mark ("2. 칼슘", "B. Seoul").
_SENTENCE = re.compile(r"(?<=[.!?。])(?<!^\d\.)(?<!^\d\d\.)(?<!^[A-Za-z]\.)\s+")
# Where a clause ends inside a sentence: punctuation, a dash, a Korean ending of cause or
# reason ("…이므로", "…인 이유는"), or before "because", "so", "therefore"…
_CLAUSE = re.compile(
    r"(?<=[,;:\uff0c\uff1b\uff1a])\s+|\s+(?=[-\u2013\u2014]\s)"
    r"|(?:(?<=므로)|(?<=때문에)|(?<=니까)|(?<=으니)|(?<=이니)|(?<=이유는)|(?<=까닭은)"
    r"|(?<=근거는)|(?<=왜냐하면))\s+"
    r"|\s+(?=(?:because|since|as\s+shown|so|thus|therefore|hence|which\s+means)\b)",
    re.IGNORECASE,
)
# A clause that only continues the one before: "which is calcium", "namely B", "즉 ②".
_CONTINUES = re.compile(r"^\W*(?:which|that|who|namely|i\.e\.|즉|바로|곧)\b", re.IGNORECASE)
# Layout at a line's start: indent, list bullet, heading, quote.
_LAYOUT = re.compile(r"^\s*(?:(?:[-*+•>]|#{1,6})\s*)*")
_LONE_MARK = re.compile(r"^\W*(?:\d{1,2}|[A-Ha-h])\W*$")
_RULE = re.compile(r"^\s*(?:[-*_=]\s*){3,}$")
# A label that ends its line: the answer is what follows ("**정답**", "## Answer", "정답:").
_LABEL_ALONE = re.compile(
    r"^(?:최종\s*)?(?:정답|답|해답)(?:은|는)?\s*[:\uff1a]?$"
    r"|^(?:the\s+)?(?:(?:correct|right|final|best)\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:\uff1a]?$",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W\d_]{2,}")
_FUNCTION_WORDS = re.compile(
    r"\b(?:is|was|the|an?|it|option|choice|number|so|thus|hence|therefore|which|namely)\b"
    r"|(?<![가-힣])(?:따라서|그러므로|그래서|결국|즉|보기|선택지)(?![가-힣])",
    re.IGNORECASE,
)

_LONGEST_REF = 40  # a choice's name or mark this long is still seen before its verdict
#: Fewer words of reasoning than this left, besides the choices' own names: nothing to judge.
MIN_REASONING_WORDS = 2


def _plain(text: str) -> str:
    return answers._fold(answers._markdown_off(text))


def _choice_names(choices: Sequence[str]) -> list[re.Pattern[str]]:
    """A pattern per choice text, as a word: "4" not inside "42" or "4.5", "Mars" not "Marsh"."""
    return [
        re.compile(rf"(?<![0-9A-Za-z.]){re.escape(name)}(?![0-9A-Za-z]|[.,]\d)", re.IGNORECASE)
        for choice in choices
        if (name := answers._fold(choice).strip())
    ]


def _names_choice(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    return _REF.search(text) is not None or any(name.search(text) for name in names)


def _right_about_choice(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    """A choice named, then an unnegated verdict that it is the one ("②가 맞다", "4 is correct")."""
    verdicts = list(_RIGHT.finditer(text))
    if _CONCLUSION.search(text):
        verdicts += _TRUE.finditer(text)
    for verdict in verdicts:
        # The choice named at most 40 characters before its verdict ("② 칼슘이 맞다").
        start = max(0, verdict.start() - 40 - _LONGEST_REF)
        window = text[start : verdict.start()]
        ends = [m.end() for m in _REF.finditer(window)]
        ends += [m.end() for name in names for m in name.finditer(window)]
        for end in ends:
            if len(window) - end <= 40:
                after = text[start + end : verdict.end() + 12]
                if not _NEGATION.search(after):
                    return True
    return False


def _is_statement(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    """The text states the answer, names a choice as it, or says which to pick."""
    plain = _plain(text)
    if _ANSWER_WORD.search(plain) or _PICK.search(plain) or _right_about_choice(plain, names):
        return True
    starts = [m.start() for m in _REF.finditer(plain)]
    starts += [m.start() for name in names for m in name.finditer(plain)]
    return any(_WHICH_IS.search(plain[max(0, at - 40) : at]) for at in starts)


def _content(text: str, names: Sequence[re.Pattern[str]]) -> int:
    """Words of the text beside the choices' marks and names and the words around them."""
    plain = _FUNCTION_WORDS.sub(" ", _REF.sub(" ", _plain(text)))
    for name in names:
        plain = name.sub(" ", plain)
    return len(_WORD.findall(plain))


def _bare(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    """Only a choice named (``②``, ``**B**``, ``(B) Seoul``, ``따라서 ②번이다``): no reasoning."""
    plain = re.sub(r"(?:번|이다|입니다|이에요|예요|이야|임|이|가|은|는)?\W*$", "", _plain(text))
    if _LONE_MARK.match(plain):
        return True  # "So, B.": a letter alone is no word of reasoning
    return _names_choice(plain, names) and _content(plain, names) == 0


@dataclass
class _Reader:
    """Hides the statements of one explanation, line by line."""

    choices: Sequence[str]

    def __post_init__(self) -> None:
        self.names = _choice_names(self.choices)
        # After a label ending its line, the next sentence: "always" hidden; "bare" only
        # when it is no more than a choice (after a heading like "정답 및 해설").
        self.pending = ""

    def line(self, line: str) -> str | None:
        """The line with its statements hidden; None when nothing of it is left."""
        if not line.strip() or _RULE.match(line):
            return line
        cut = len(line) - len(_LAYOUT.sub("", line, count=1))  # it matches any line
        prefix, body = line[:cut], line[cut:]
        kept = [part for s in _SENTENCE.split(body) if (part := self.sentence(s)) is not None]
        return prefix + " ".join(kept) if kept else None

    def sentence(self, sentence: str) -> str | None:
        pending, self.pending = self.pending, ""
        plain = _plain(sentence).strip(answers._EDGE + "#> ")
        if not plain:
            return sentence
        if pending == "always" or (pending == "bare" and _bare(sentence, self.names)):
            return None
        if _LABEL_ALONE.match(plain):
            self.pending = "always"
            return None
        sentence = _TICK.sub("", sentence)
        sentence = _ASIDE.sub(
            lambda m: "" if _is_statement(m[0], self.names) else m[0], sentence
        ).strip()
        if not sentence:
            return None  # it was a statement in parentheses: "(정답: ② 칼슘)"
        if _CONCLUSION.search(plain) and _bare(re.sub(_CONCLUSION, "", plain), self.names):
            return None  # "따라서 ②번이다.", "So, B."
        if not _is_statement(sentence, self.names):
            return sentence
        if plain.endswith((":", "\uff1a")) or not self.names_answer(sentence):
            self.pending = "always" if plain.endswith((":", "\uff1a")) else "bare"
        return self.clauses(sentence)

    def names_answer(self, text: str) -> bool:
        """A statement that names its answer, so nothing after it can be that answer."""
        _, named = answers.read(_plain(text), self.choices)
        return isinstance(named, int) or _names_choice(_plain(text), self.names)

    def clauses(self, sentence: str) -> str | None:
        """The reasoning clauses of a sentence that states the answer, or None: each clause
        that states it must name its answer, or the whole sentence goes."""
        cuts = [0, *(m.end() for m in _CLAUSE.finditer(sentence)), len(sentence)]
        pieces = [sentence[a:b] for a, b in itertools.pairwise(cuts) if b > a]
        kept: list[str] = []
        # stated: a clause stated the answer; label: one did without naming it (what follows
        # may be that answer); after: the clause before was a statement.
        stated = label = after = False
        for piece in pieces:
            if _is_statement(piece, self.names):
                stated = after = True
                label = label or not self.names_answer(piece)
                continue
            if _content(piece, ()) < MIN_REASONING_WORDS:
                continue  # "Therefore, ", "② 칼슘: ", "We ": no reasoning of its own
            if after and (_CONTINUES.match(_plain(piece)) or _bare(piece, self.names)):
                continue  # "…, calcium.", "which is calcium": the answer's own words
            if label:
                return None  # "정답은, 두 번째 보기인 칼슘이다": the clause may be the answer
            kept.append(piece)
            after = False
        # A statement spread over clauses ("B) Calcium: correct.") goes whole.
        if not stated:
            return None
        return "".join(kept).strip() or None


def hide_statements(reply: str, choices: Sequence[str]) -> str:
    """The reply with every statement of the answer hidden: the reasoning alone."""
    reader = _Reader(choices)
    kept = [line for raw in reply.splitlines() if (line := reader.line(raw)) is not None]
    # A rule left with nothing on one side ("**정답**", a rule, "②") separates nothing.
    while kept and (not kept[0].strip() or _RULE.match(kept[0])):
        kept.pop(0)
    while kept and (not kept[-1].strip() or _RULE.match(kept[-1])):
        kept.pop()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


@dataclass(frozen=True)
class Blind:
    """What the verifier may read, and why it must not be asked ("" when it may)."""

    text: str
    problem: str


def blind(reply: str, choices: Sequence[str]) -> Blind:
    """The reply's reasoning and what makes a blind check of it impossible ("" if nothing)."""
    text = hide_statements(reply, choices)
    names = _choice_names(choices)
    if _content(text, names) < MIN_REASONING_WORDS:
        return Blind(text, "nothing of the reasoning is left once its answer is hidden")
    _, named = answers.read(text, choices)
    left = _ANSWER_WORD.search(_plain(text)) or _PICK.search(_plain(text))
    if isinstance(named, int) or left:
        said = left[0] if left else f"choice {named}"
        return Blind(text, f"the reasoning still states an answer ({said!r})")
    return Blind(text, "")
