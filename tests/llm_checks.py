"""How the test LLM server answers a key audit or a blind verifier call as a sound model would.

Neither prompt holds the key: the audit's holds the question and its numbered choices, the
verifier's those and the explanation without its statements of an answer. So the answer is
worked out from what the prompt holds, as a model would, within what a few lines can do:

- the audit evaluates simple arithmetic in the question ("What is 2 + 2?") and names the one
  choice equal to it, else the one choice the question itself names;
- the verifier names the one choice the reasoning mentions (by its text, or a small number
  in words: "four" for "4"), the last sentence deciding between several, else the one choice
  its arithmetic comes to.

When that leaves no single choice it says so ("Answer: none"): the check then reports that it
could not tell, never a made-up dispute or disagreement. Pure text: no Django.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

NONE = "Answer: none"

# The sections of a check's prompt: "Question:", "Choices:", "Explanation:" on lines of
# their own (a header with more words before its colon is still one: the wording may change).
_SECTION = re.compile(r"^(Question|Choices|Explanation)\b[^\n:]{0,40}:[ \t]*$", re.M)
_CHOICE = re.compile(r"^\s*(\d{1,2})[.)]\s+(.*?)\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+|\n+")

_NUMBER = r"\d+(?:\.\d+)?"
# Times, divided by and minus as typed, or typeset (multiplication, division, minus signs).
_OPERATOR = "[-+*/x\u00d7\u00f7\u2212]"
# Whole numbers only: not "v1.2 - 3" out of a version, nor "4th".
_EXPRESSION = re.compile(
    rf"(?<!\w)(?<!\d\.){_NUMBER}(?:[ \t]*{_OPERATOR}[ \t]*{_NUMBER})+(?!\w)(?!\.\d)"
)
_SYMBOLS = str.maketrans({"x": "*", "\u00d7": "*", "\u00f7": "/", "\u2212": "-"})
_OPERATIONS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]  # fmt: skip


@dataclass(frozen=True)
class CheckPrompt:
    """A check's user message, read back: the question, its choices, the explanation
    ("" for a key audit)."""

    question: str
    choices: list[str]
    explanation: str


def parse(prompt: str) -> CheckPrompt:
    """The sections of a check's user message (empty ones when it has none)."""
    headers = list(_SECTION.finditer(prompt))
    sections: dict[str, str] = {}
    for n, header in enumerate(headers):
        name = header[1]
        if name in sections or (name != "Question" and "Question" not in sections):
            continue  # a header-like line inside the question or the explanation
        end = headers[n + 1].start() if n + 1 < len(headers) else len(prompt)
        if name == "Explanation":
            end = len(prompt)  # the explanation runs to the end, whatever lines it holds
        sections[name] = prompt[header.end() : end].strip()
        if name == "Explanation":
            break
    choices: list[str] = []
    for line in sections.get("Choices", "").splitlines():
        match = _CHOICE.match(line)
        if match and int(match[1]) == len(choices) + 1:
            choices.append(match[2])
    return CheckPrompt(sections.get("Question", ""), choices, sections.get("Explanation", ""))


def audit_reply(prompt: str) -> str:
    """A key audit's reply: the choice the question's arithmetic comes to, else the one
    choice the question names, else none."""
    asked = parse(prompt)
    found = _by_arithmetic(asked.question, asked.choices) or _only(
        _mentioned(asked.question, asked.choices)
    )
    return _answer(found, asked.choices)


def verify_reply(prompt: str) -> str:
    """A verifier's reply: the choice the explanation's reasoning supports, else none."""
    asked = parse(prompt)
    reasoning, choices = asked.explanation, asked.choices
    mentioned = _mentioned(reasoning, choices)
    if len(mentioned) > 1:
        # Several are weighed: the reasoning's conclusion comes last.
        for sentence in reversed(_SENTENCE_END.split(reasoning)):
            if last := _mentioned(sentence, choices):
                mentioned = last
                break
    found = _only(mentioned) or _by_arithmetic(reasoning, choices, among=mentioned)
    return _answer(found, choices)


def _answer(number: int | None, choices: Sequence[str]) -> str:
    """The reply line for a choice: "Answer: N", or its letter when N is also another
    choice's text (choices "2", "4": "Answer: 2" could be either; "Answer: B" is not)."""
    if number is None:
        return NONE
    if any(choice.strip() == str(number) for choice in choices[: number - 1]) or any(
        choice.strip() == str(number) for choice in choices[number:]
    ):
        return f"Answer: {chr(ord('A') + number - 1)}"
    return f"Answer: {number}"


def _only(numbers: set[int]) -> int | None:
    return next(iter(numbers)) if len(numbers) == 1 else None


def _aliases(choice: str) -> list[str]:
    """A choice's text as a reader may meet it: itself and, for a small whole number, the
    number in digits and in words."""
    text = choice.strip().lower()
    value = _value(text)
    if value is None or value != int(value) or not 0 <= value < len(_WORDS):
        return [text] if text else []
    return list(dict.fromkeys([text, str(int(value)), _WORDS[int(value)]]))


def _mentioned(text: str, choices: Sequence[str]) -> set[int]:
    """The choices (1-based) ``text`` mentions as whole words or numbers."""
    found = {
        number
        for number, choice in enumerate(choices, 1)
        if any(_says(text, alias) for alias in _aliases(choice))
    }
    # A choice inside a longer one that is mentioned ("Seoul" in "Seoul Tower") is that one.
    return {
        n
        for n in found
        if not any(m != n and _says(choices[m - 1], choices[n - 1].strip()) for m in found)
    }


def _says(text: str, words: str) -> bool:
    """``words`` occur in ``text`` whole: not a piece of a longer word or number ("4" in
    "14", "4.5" or "4th")."""
    bounded = rf"(?<![0-9a-z])(?<![0-9][.,]){re.escape(words.lower())}(?![0-9a-z])(?![.,][0-9])"
    return bool(words) and re.search(bounded, text.lower()) is not None


def _by_arithmetic(text: str, choices: Sequence[str], among: set[int] | None = None) -> int | None:
    """The one choice (of ``among``, when given some) equal to what the arithmetic in
    ``text`` comes to."""
    results = {value for m in _EXPRESSION.finditer(text) if (value := _evaluate(m[0])) is not None}
    equal = {
        n
        for n, choice in enumerate(choices, 1)
        if (value := _value(choice.strip().lower())) is not None
        and any(abs(value - result) < 1e-9 for result in results)
    }
    return _only(equal & among if among and equal & among else equal)


def _value(text: str) -> float | None:
    if text in _WORDS:
        return float(_WORDS.index(text))
    try:
        return float(text)
    except ValueError:
        return None


def _evaluate(expression: str) -> float | None:
    """``2 + 2 * 3`` with the usual precedence; None for what is no arithmetic."""

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATIONS:
            return _OPERATIONS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(expression)

    try:
        return value(ast.parse(expression.translate(_SYMBOLS), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


_SCORE = re.compile(r"^Score: (\d+) of (\d+) right\.", re.M)
_MISSED = re.compile(r"^Question (\d+):(?:(?!^Question \d+:).)*?^Result: missed", re.M | re.S)


def summary_reply(prompt: str) -> str:
    """A session summary as a sound model writes it: the score as asked, each missed
    question by its number, what to review."""
    score = _SCORE.search(prompt)
    right, total = (int(score[1]), int(score[2])) if score else (0, 0)
    percent = round(100 * right / total) if total else 0
    lines = [f"점수: {total}문제 중 {right}문제 ({percent}%)"]
    lines += [f"{n}번 문제는 틀렸습니다: 해설을 다시 읽어 보세요." for n in _MISSED.findall(prompt)]
    lines.append("다음에는 틀린 문제의 개념을 복습하세요.")
    return "\n".join(lines)
