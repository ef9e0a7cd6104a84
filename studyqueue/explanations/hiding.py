"""What the blind verifier may read of an explanation: its reasoning, every statement of the
answer hidden by sentence, then by clause (the grammar: docs/howto/checks.md, "What the
verifier sees"). ``blind`` adds why the verifier must not be asked. Pure text: no database."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from studyqueue.explanations import answers, words

_C = answers._CIRCLED_CLASS


def _states(tokens: Sequence[words.Morpheme], i: int) -> int:
    """정답, 해답, 답 as words (``answers._answer_noun``); 고르다, 택하다, 선택하다 as verbs, not
    고르게 ("evenly") nor 자연선택. MeCab reads 고를 opening a sentence ("고를 보기는 ②") as the
    noun 고 and 를."""
    pair = (tokens[i].lemma, tokens[i + 1].lemma if i + 1 < len(tokens) else "")
    if (tokens[i].tag, tokens[i].lemma) in (("VV", "고르"), ("VV", "택하")):
        return 1
    return int(answers._answer_noun(tokens, i)) or 2 * (pair in (("고", "를"), ("선택", "하")))


# Words that state the answer, or tell the reader which choice to pick ("고르면 된다", "선택해야
# 한다", "choose B", "go with"). Not 대답, 답변, 정답률, nor 오답 (a distractor called a wrong
# answer is reasoning about it), nor the verb "to answer" ("answers the question of").
_STATES_EN = re.compile(
    r"(?i)(?<!\bto )\banswer(?:s|ed)?\b(?!\s+the\s+question)"
    r"|\b(?:correct|right|best|only|true)\s+(?:one|option|choice|pick|response|selection)\b"
    r"|\b(?:pick(?:s|ed)?(?!\s+up)|choos(?:e|es|ing)|chose|select|go(?:es)?\s+with|opt\s+for)\b"
)
_STATES = words.Words(_states, _STATES_EN)
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
_BEST = {"적절", "알맞", "타당", "정확", "옳", "적합", "올바르", "바르", "맞"}


def _right(tokens: Sequence[words.Morpheme], i: int) -> int:
    """맞다 as a verdict ("②가 맞다", "맞는 것은", 맞음; not 맞는 설명, 맞아떨어지다), or 가장 with
    one ("가장 알맞다"). 들어맞다, 알맞다, 맞서다, 맞추다, 맞히다 are other words."""
    if (tokens[i].lemma, tokens[i].tag) not in (("가장", "MAG"), ("맞음", "NNG"), ("맞", "VV")):
        return 0  # most words: read no further
    lemmas = [token.lemma for token in tokens[i : i + 3]] + ["", ""]
    if lemmas[0] != "맞":
        return 2 if lemmas[1] in _BEST else int(lemmas[0] == "맞음")  # 맞음: MeCab's noun
    if any(token.tag[0] == "V" for token in tokens[i + 1 : answers._word_end(tokens, i)]):
        return 0  # a compound: 맞아떨어지다
    etm = i + 1 < len(tokens) and tokens[i + 1].tag == "ETM"  # "맞는 것은", not "맞는 설명"
    return 1 if not etm else 3 if lemmas[2] in ("것", "보", "선택") else 0


# A verdict that a named choice is the right one: "맞다", "correct", "가장 적절하다". Not
# "옳다" ("②는 옳다" in a "옳지 않은 것은?" question is reasoning): see ``_TRUE``.
_RIGHT_EN = re.compile(
    r"(?i)\b(?:correct|right)\b(?![-\u2011]|\s+(?:angles?|triangles?))|\bbest\s+(?:fits?|describes?|matches|answers)\b"
    r"|\bthe\s+one\b"
)
_RIGHT = words.Words(_right, _RIGHT_EN)


def _true(tokens: Sequence[words.Morpheme], i: int) -> int:
    """옳다, 올바르다, 적절하다, 알맞다 closing a clause ("②는 옳다."), not going on (옳고 그름,
    알맞지 않다, 알맞은 것)."""
    end = answers._word_end(tokens, i)
    closes = end == len(tokens) or tokens[end].tag[0] == "S"
    return end - i if closes and tokens[i].lemma in ("옳", "올바르", "적절", "알맞") else 0


_TRUE = words.Words(_true)
_CONCLUSION = re.compile(
    r"^\W*(?:따라서|그러므로|그래서|결국|즉|결론적으로|그러니|so|thus|therefore|hence)\b",
    re.IGNORECASE,
)
# A negation in or right after a verdict ("맞는 것은 아니다", "isn't right") voids it.
_NEGATION = words.Words(
    lambda tokens, i: int(any(form in answers.NOT_WORDS for form, _ in tokens[i].parts)),
    re.compile(r"(?i)\bnot\b|n['\u2019]t\b|\bnever\b|\bno\b"),
)
# The predicates a question asks with ("옳지 않은 것은?", "조건에 들어맞는 것은?").
_QUALITIES = _BEST | answers.NOT_WORDS | {"해당", "멀", "없", "들어맞"}
_ITEMS = ("것", "보기", "선택지", "설명", "진술", "내용", "항목")


def _which(tokens: Sequence[words.Morpheme], i: int) -> int:
    """The question's wording, closing before the answer it names: "옳지 않은 것은 ③",
    "알맞은 설명은 ②번", "조건에 들어맞는 것은 ②"."""
    for at in range(i, min(i + 4, len(tokens) - 1) if tokens[i].lemma in _QUALITIES else i):
        if tokens[at].parts[-1][1] == "ETM":  # 옳지 않은, 해당하는, 먼
            end = answers._word_end(tokens, at + 1)
            item = "".join(token.surface for token in tokens[at + 1 : end])
            return end - i if item[:-1] in _ITEMS and item[-1] in "은는" else 0
    return 0


_WHICH_IS = words.Words(_which)
# Marks that tick a choice as the answer ("② 칼슘 ✅", "(O)"): the mark goes, the line stays.
_TICK = re.compile(r"\s*(?:[\u2713\u2714\u2705\u2611\u2b55]|[(\uff08]\s*[O○◯]\s*[)\uff09])")
# A parenthesis or bracket inside a sentence: "(정답 ②)", "[answer B]".
_ASIDE = re.compile(
    r"\s*(?:\([^()\n]{0,80}\)|\uff08[^\uff08\uff09\n]{0,80}\uff09|\[[^\[\]\n]{0,80}\]|【[^【】\n]{0,80}】)"
)

# Where a sentence ends: after . ! ? 。 and a blank; not after a list mark ("2. 칼슘", "B. Seoul").
SENTENCE = re.compile(r"(?<=[.!?。])(?<!^\d\.)(?<!^\d\d\.)(?<!^[A-Za-z]\.)\s+")
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
LAYOUT = re.compile(r"^\s*(?:(?:[-*+•>]|#{1,6})\s*)*")
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


def _marks(text: str, names: Sequence[re.Pattern[str]]) -> list[re.Match[str]]:
    """Where ``text`` names a choice: by a mark (``_REF``), or by the choice's text."""
    return [*_REF.finditer(text), *(m for name in names for m in name.finditer(text))]


def _right_about_choice(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    """A choice named, then an unnegated verdict that it is the one ("②가 맞다", "4 is correct")."""
    verdicts = list(_RIGHT.finditer(text))
    if _CONCLUSION.search(text):
        verdicts += _TRUE.finditer(text)
    for verdict in verdicts:
        # The choice named at most 40 characters before its verdict ("② 칼슘이 맞다").
        start = max(0, verdict.start() - 40 - _LONGEST_REF)
        window = text[start : verdict.start()]
        for end in (m.end() for m in _marks(window, names)):
            if len(window) - end <= 40:
                after = text[start + end : verdict.end() + 12]
                if not _NEGATION.search(after):
                    return True
    return False


def _is_statement(text: str, names: Sequence[re.Pattern[str]]) -> bool:
    """The text states the answer, names a choice as it, or says which to pick."""
    plain = _plain(text)
    if _STATES.search(plain) or _right_about_choice(plain, names):
        return True
    starts = [m.start() for m in _marks(plain, names)]
    ends = [m.end() for m in _WHICH_IS.finditer(plain)]
    return any(end <= at and not plain[end:at].strip() for end in ends for at in starts)


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
    return bool(_marks(plain, names)) and _content(plain, names) == 0


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
        cut = len(line) - len(LAYOUT.sub("", line, count=1))  # it matches any line
        prefix, body = line[:cut], line[cut:]
        kept = [part for s in SENTENCE.split(body) if (part := self.sentence(s)) is not None]
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
        return isinstance(named, int) or bool(_marks(_plain(text), self.names))

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
    shown = [i for i, line in enumerate(kept) if line.strip() and not _RULE.match(line)]
    kept = kept[shown[0] : shown[-1] + 1] if shown else []
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
    left = _STATES.search(_plain(text))
    if isinstance(named, int) or left:
        said = left[0] if left else f"choice {named}"
        return Blind(text, f"the reasoning still states an answer ({said!r})")
    return Blind(text, "")
