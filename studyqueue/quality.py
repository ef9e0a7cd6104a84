"""Quality flags on a finished explanation: checked, not silently accepted.

- ``truncated``: the model stopped at ``max_tokens`` (``finish_reason: length``);
- ``unfinished``: the reply ended for another reason than ``stop`` or ``length``
  (``content_filter``, ``tool_calls``…, or no reason at all before the stream ended);
- ``too_short``: fewer characters than ``QUALITY_MIN_CHARS``;
- ``wrong_script``: written in another script than the question (a Korean question answered
  in English), compared by the dominant Unicode script of their letters.
"""

from __future__ import annotations

import unicodedata
from collections import Counter

from studyqueue.conf import conf

TRUNCATED, UNFINISHED = "truncated", "unfinished"
TOO_SHORT, WRONG_SCRIPT = "too_short", "wrong_script"
FLAGS = (TRUNCATED, UNFINISHED, TOO_SHORT, WRONG_SCRIPT)
# Kana count with the ideographs: Japanese mixes kana and kanji in one text.
_SAME = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}
_SAMPLE = 2000  # characters looked at: enough to know the script, cheap for any length


def script_of(char: str) -> str | None:
    """The script of a letter (``LATIN``, ``HANGUL``, ``CYRILLIC``, ``CJK``…); None else."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    if not name:
        return None
    script = name.split(" ", 1)[0]
    return _SAME.get(script, script)


def dominant_script(text: str) -> str | None:
    """The script most of a text's letters are written in; None when it has no letters."""
    counts = Counter(s for s in map(script_of, text[:_SAMPLE]) if s is not None)
    return counts.most_common(1)[0][0] if counts else None


def flags_for(question_text: str, explanation: str, finish_reason: str) -> list[str]:
    """The quality flags a reply earns, in ``FLAGS`` order."""
    flags = []
    if finish_reason == "length":
        flags.append(TRUNCATED)
    elif finish_reason != "stop":  # only "stop" says the model finished its answer
        flags.append(UNFINISHED)
    if len(explanation.strip()) < conf.QUALITY_MIN_CHARS:
        flags.append(TOO_SHORT)
    asked, answered = dominant_script(question_text), dominant_script(explanation)
    if asked and answered and asked != answered:
        flags.append(WRONG_SCRIPT)
    return flags


def flags_to_retry() -> set[str]:
    """The flags that retry the job once instead of only flagging (``QUALITY_RETRY``)."""
    return {flag.strip() for flag in conf.QUALITY_RETRY.split(",") if flag.strip()}
