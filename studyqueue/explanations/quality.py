"""Quality flags on a finished explanation, each with a label and a one-line meaning
(``MEANINGS``, the admin's badges; docs/reference/quality.md)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

from django.db import models
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from studyqueue.conf import conf
from studyqueue.explanations import answers
from studyqueue.models import QUESTION_CHANGED_FLAG, FinishReason, StudyQuestion


class QualityFlag(models.TextChoices):
    """What a reply can be flagged for (stored as the values, in this order)."""

    TRUNCATED = "truncated", _("truncated")
    UNFINISHED = "unfinished", _("unfinished")
    TOO_SHORT = "too_short", _("too short")
    WRONG_SCRIPT = "wrong_script", _("wrong script")
    # Appended, so that a cut reply (which often loses its answer line) retries as truncated.
    ANSWER_MISMATCH = "answer_mismatch", _("answer mismatch")
    NO_ANSWER_STATED = "no_answer_stated", _("no answer stated")
    QUESTION_CHANGED = QUESTION_CHANGED_FLAG, _("question changed")
    # Set after the explanation was kept, by the blind verifier (``verifier``): never retried.
    VERIFIER_DISAGREES = "verifier_disagrees", _("verifier disagrees")
    VERIFIER_UNSURE = "verifier_unsure", _("verifier unsure")
    # Set after the explanation was kept, by the step check (``step_check``): never retried.
    WRONG_STEP = "wrong_step", _("wrong step")
    STEP_CHECK_UNSURE = "step_check_unsure", _("step check unsure")


# The names the rest of the code and the settings know them by.
TRUNCATED, UNFINISHED = QualityFlag.TRUNCATED, QualityFlag.UNFINISHED
TOO_SHORT, WRONG_SCRIPT = QualityFlag.TOO_SHORT, QualityFlag.WRONG_SCRIPT
ANSWER_MISMATCH, NO_ANSWER_STATED = QualityFlag.ANSWER_MISMATCH, QualityFlag.NO_ANSWER_STATED
QUESTION_CHANGED = QualityFlag.QUESTION_CHANGED
VERIFIER_DISAGREES, VERIFIER_UNSURE = QualityFlag.VERIFIER_DISAGREES, QualityFlag.VERIFIER_UNSURE
VERIFIER_FLAGS = (VERIFIER_DISAGREES, VERIFIER_UNSURE)
WRONG_STEP, STEP_CHECK_UNSURE = QualityFlag.WRONG_STEP, QualityFlag.STEP_CHECK_UNSURE
STEP_FLAGS = (WRONG_STEP, STEP_CHECK_UNSURE)
FLAGS: tuple[QualityFlag, ...] = tuple(QualityFlag)
# What each flag means, in one line: the admin's badges show it on hover.
MEANINGS: dict[str, str | Promise] = {
    TRUNCATED: _("The model stopped at max_tokens: the text may end mid-sentence."),
    UNFINISHED: _("The reply ended for another reason than finishing (a filter, no reason)."),
    TOO_SHORT: _("Shorter than QUALITY_MIN_CHARS characters."),
    WRONG_SCRIPT: _("Written in another script than the question (e.g. English for Korean)."),
    ANSWER_MISMATCH: _("The answer the explanation states is not the question's key."),
    NO_ANSWER_STATED: _("The explanation states no answer that could be read."),
    QUESTION_CHANGED: _("The question's text, choices or key changed after it was written."),
    VERIFIER_DISAGREES: _(
        "Shown the explanation's reasoning with every statement of its answer hidden, the "
        "model named another choice than the key: the reasoning may argue for the wrong answer."
    ),
    VERIFIER_UNSURE: _(
        "Shown the explanation's reasoning with every statement of its answer hidden, the "
        "model named no choice, or several; or it was not asked, because the statements could "
        "not be hidden: the reasoning may not support any answer."
    ),
    WRONG_STEP: _(
        "Shown the key and the explanation sentence by sentence, the model named a sentence "
        "as the first wrong one: the explanation may reach the key through a false step."
    ),
    STEP_CHECK_UNSURE: _(
        "Shown the key and the explanation sentence by sentence, the model's reply named no "
        "single sentence and did not say that none is wrong: the steps were not checked."
    ),
}
# Reply verdicts that are flags (agreeing, or a question without a key, is none).
_ANSWER_FLAGS = {answers.Verdict.DIFFERS: ANSWER_MISMATCH, answers.Verdict.UNREAD: NO_ANSWER_STATED}
# Kana count with the ideographs: Japanese mixes kana and kanji in one text.
_SAME = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}
_SAMPLE = 2000  # characters looked at: enough to know the script, cheap for any length


def dominant_script(text: str) -> str | None:
    """The script most of a text's letters are in (``LATIN``, ``HANGUL``, ``CJK``…), or None."""
    counts: Counter[str] = Counter()
    # Each distinct character named once: the Unicode name lookup is the cost.
    for char, times in Counter(text[:_SAMPLE]).items():
        name = unicodedata.name(char, "") if unicodedata.category(char).startswith("L") else ""
        if name:
            script = name.split(" ", 1)[0]
            counts[_SAME.get(script, script)] += times
    return counts.most_common(1)[0][0] if counts else None


def flags_for(
    question_text: str,
    explanation: str,
    finish_reason: str,
    *,
    agreement: answers.Agreement | None = None,
) -> list[QualityFlag]:
    """The quality flags a reply earns, in ``FLAGS`` order (``agreement``: from ``compare``)."""
    flags = []
    if finish_reason == FinishReason.LENGTH:
        flags.append(TRUNCATED)
    elif finish_reason != FinishReason.STOP:  # only "stop" says the model finished its answer
        flags.append(UNFINISHED)
    if len(explanation.strip()) < conf.QUALITY_MIN_CHARS:
        flags.append(TOO_SHORT)
    asked, answered = dominant_script(question_text), dominant_script(explanation)
    if asked and answered and asked != answered:
        flags.append(WRONG_SCRIPT)
    if agreement is not None and agreement.verdict in _ANSWER_FLAGS:
        flags.append(_ANSWER_FLAGS[agreement.verdict])
    return flags


@dataclass(frozen=True)
class Checked:
    """An explanation checked: its flags and the answer it states (blank: none read)."""

    flags: list[QualityFlag]
    stated: str


def check(question: StudyQuestion, explanation: str, finish_reason: str) -> Checked:
    """The checks every explanation gets, a model's reply or a reviewer's correction alike."""
    agreement = answers.compare(explanation, question.choices, question.answer)
    flags = flags_for(question.text, explanation, finish_reason, agreement=agreement)
    return Checked(flags, agreement.stated)


def parse_flags(text: str) -> tuple[set[QualityFlag], list[str]]:
    """``QUALITY_RETRY``'s list of names: the flags it names, and the others (sorted)."""
    names = {name.strip() for name in text.split(",")} - {""}
    known = {QualityFlag(name) for name in names if name in QualityFlag.values}
    return known, sorted(names - known)
