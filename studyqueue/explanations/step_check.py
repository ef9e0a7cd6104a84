"""The step check: the model reads the question, its choices, the key as its reference and the
explanation one numbered sentence a line, and names the first wrong sentence, or none
(docs/howto/checks.md, "The step check"). A reply that says neither plainly is ``unsure``."""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from studyqueue.explanations import answers, key_audit, revisions, verifier, words
from studyqueue.explanations.hiding import LAYOUT, SENTENCE  # one rule: hiding's sentences
from studyqueue.explanations.verifier import Check
from studyqueue.models import (
    ExplanationRevision,
    StepCheck,
    StudyQuestion,
    validate_choices,
)
from studyqueue.queue.transitions import Usage
from studyqueue.services.llm import LLMReply

MAX_TOKENS = verifier.MAX_TOKENS  # a number, or none: one short line

# Fixed text first, in the system message (the server's prompt cache); the question last.
SYSTEM = (
    "You check the steps of explanations of multiple-choice questions. You are given the "
    "question, its choices, the reference answer and the explanation, one numbered sentence "
    "per line. Find the first sentence that states something false or reasons wrongly. Reply "
    'with one line only: "Step: N", where N is the number of that sentence, or "Step: none" '
    "if no sentence is wrong. Do not explain."
)
#: The gate's name for the step check's prompt prefix (its warm-first groups calls by it).
PREFIX = hashlib.sha256(SYSTEM.encode()).hexdigest()[:12]

_FLAGS: dict[str, list[str]] = {
    StepCheck.WRONG_STEP: [revisions.WRONG_STEP],
    StepCheck.UNSURE: [revisions.STEP_CHECK_UNSURE],
}
_MARKUP = re.compile(r"[*_`#]+")
_QUOTED = re.compile(r'"[^"\n]*"|\u201c[^\u201d\n]*\u201d|「[^」\n]*」|『[^』\n]*』')
_NUMBER = re.compile(r"\d+")


def _cannot(tokens: Sequence[words.Morpheme], i: int) -> bool:
    """수 없다 ("할 수 없다"): a negation, not "none"."""
    return i > 0 and tokens[i - 1].lemma == "수" and tokens[i].has("없", "VA")


def _none(tokens: Sequence[words.Morpheme], i: int) -> int:
    """없다 ("오류 없음", "틀린 문장이 없습니다"), or 모두/모든 … 맞다/옳다."""
    if tokens[i].has("없", "VA"):
        return int(not _cannot(tokens, i))
    after = [token.lemma for token in tokens[i + 1 : i + 4]]
    return 2 if tokens[i].lemma in ("모두", "모든") and ({"맞", "옳"} & set(after)) else 0


# "No wrong sentence": what a reply says when every step holds.
_NONE = words.Words(
    _none,
    re.compile(
        r"(?i)\b(?:none|nothing)\b|\bno\s+(?:\w+\s+)?(?:errors?|mistakes?|wrong|false|incorrect)\b"
        r"|\ball\s+(?:\w+\s+){0,3}(?:correct|right|true|sound)\b"
    ),
)
_HEDGES = {"아마", "모르", "불확실", "듯", "듯하", "또는", "혹은", "글쎄"}


def _hedge(tokens: Sequence[words.Morpheme], i: int) -> int:
    """아마, 모르다, 또는…; 것 같다; 확실하지 않다."""
    after = {form for token in tokens[i + 1 : i + 4] for form, _ in token.parts}
    return int(
        tokens[i].lemma in _HEDGES
        or (tokens[i].lemma == "것" and "같" in after)
        or (tokens[i].lemma == "확실" and bool(after & {"않", "아니", "못"}))
    )


# A hedge or a question: whatever else the reply says, it is not read.
_DOUBT = words.Words(
    _hedge,
    re.compile(
        r"(?i)\?|\b(?:maybe|perhaps|probably|possibly|likely|unsure|unclear|uncertain|might|"
        r"may|seems?|either|or|guess)\b|not\s+sure"
    ),
)
# A negation turns "no error" around ("not true that there is no error"); a wrong step's
# statement may hold one ("3번 문장은 옳지 않다"), so it only undoes a "none".
_NEGATION = words.Words(
    lambda tokens, i: int(
        any(form in ("않", "아니", "못", "못하") for form, _ in tokens[i].parts)
        or _cannot(tokens, i)
    ),
    re.compile(r"(?i)\b(?:not|never|cannot)\b|n['\u2019]t\b"),
)


def steps(text: str) -> list[tuple[int, int]]:
    """Where each sentence of ``text`` is (start, end): every non-empty line, past its list
    mark or heading, split after . ! ? 。 as ``hiding`` splits it; blanks trimmed."""
    found, offset = [], 0
    for line in text.splitlines(keepends=True):
        body = LAYOUT.sub("", line, count=1)  # "^" in SENTENCE is the body's start
        start, shift = 0, offset + len(line) - len(body)
        for match in [*SENTENCE.finditer(body), None]:
            end = match.start() if match else len(body)
            piece = body[start:end]
            if piece.strip():
                lead = len(piece) - len(piece.lstrip())
                found.append((shift + start + lead, shift + start + len(piece.rstrip())))
            start = match.end() if match else end
        offset += len(line)
    return found


def sentences(text: str) -> list[str]:
    """``text``'s sentences, as the model sees them numbered."""
    return [text[start:end] for start, end in steps(text)]


def build_messages(question: StudyQuestion, explanation: str) -> list[dict[str, str]]:
    """The step check's messages: the question, its choices, the key as the reference and
    every sentence of ``explanation``, numbered (invalid choices: ``ValidationError``)."""
    validate_choices(question.choices)
    key = answers.key_choice(question.answer, question.choices)
    reference = f"{key}. {question.choices[key - 1]}" if key else question.answer.strip()
    numbered = "\n".join(f"[{n}] {s}" for n, s in enumerate(sentences(explanation), 1))
    return key_audit.check_messages(
        SYSTEM, question, f"Reference answer: {reference}", f"Explanation:\n{numbered}"
    )


def read(reply: str, steps: Sequence[str]) -> tuple[StepCheck, int | None]:
    """The verdict a reply gives on ``steps``: ``WRONG_STEP`` and the number of the one
    sentence it names, ``OK`` when it plainly names none, else ``UNSURE``."""
    text = unicodedata.normalize("NFKC", reply)
    if not steps or len(text) > answers.SHORT_REPLY_CHARS or _DOUBT.search(text):
        return StepCheck.UNSURE, None
    for sentence in sorted(steps, key=len, reverse=True):  # an echoed sentence is no answer
        if len(sentence) >= 8:
            text = text.replace(unicodedata.normalize("NFKC", sentence), " ")
    text = _QUOTED.sub(" ", _MARKUP.sub("", text))
    numbers = {int(number) for number in _NUMBER.findall(text)}
    if _NONE.search(text):
        plain = not numbers and not _NEGATION.search(text)
        return (StepCheck.OK, None) if plain else (StepCheck.UNSURE, None)
    if len(numbers) == 1 and 1 <= (step := numbers.pop()) <= len(steps):
        return StepCheck.WRONG_STEP, step
    return StepCheck.UNSURE, None


@dataclass(frozen=True)
class StepChecked(Check):
    """The step check's result: its verdict and the wrong sentence's number and text."""

    verdict: StepCheck
    step: int | None
    sentence: str

    step_check = True
    log = logging.getLogger("studyqueue.step_check")

    def record(self, now: StudyQuestion) -> str:
        revisions.record_verdict(
            self.revision.pk,
            now,
            flags=_FLAGS.get(self.verdict, []),
            replaced=(revisions.WRONG_STEP, revisions.STEP_CHECK_UNSURE),
            step_check=self.verdict,
            wrong_step=self.step,
            wrong_step_text=self.sentence,
            step_check_reply=self.reply,
        )
        return (
            f"study_step_checked question={now.pk} revision={self.revision.pk} "
            f"step_check={self.verdict} wrong_step={self.step or '-'}"
        )


def checked(question: StudyQuestion, revision: ExplanationRevision, reply: LLMReply) -> StepChecked:
    """The handler's result: ``reply`` read against the revision's sentences."""
    found = sentences(revision.text)
    verdict, step = read(reply.content, found)
    return StepChecked(
        question,
        revision,
        reply.content,
        verdict,
        step,
        found[step - 1] if step else "",
        usage=Usage.of([reply]),
        llm_ms=reply.elapsed_ms,
    )
