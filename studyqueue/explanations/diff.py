"""Two texts side by side with their differences marked, word by word: what a reviewer reads
to see what a regeneration or a correction changed."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# A page never diffs a megabyte reply: each side is compared up to this many characters.
DIFF_CHARS = 20_000
# Words with the blanks after them: few repeated tokens, so the matcher stays fast on prose.
_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class SideBySide:
    """The old and the new text as escaped HTML: removed words in ``<del>``, added in ``<ins>``."""

    old: SafeString
    new: SafeString
    changed: bool
    cut: bool  # a side was longer than DIFF_CHARS: its end is not compared


def side_by_side(old: str, new: str) -> SideBySide:
    """Mark what differs between ``old`` and ``new``."""
    cut = len(old) > DIFF_CHARS or len(new) > DIFF_CHARS
    a, b = _WORDS.findall(old[:DIFF_CHARS]), _WORDS.findall(new[:DIFF_CHARS])
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    left = [_marked("del", "".join(a[i1:i2]), tag == "equal") for tag, i1, i2, _, _ in opcodes]
    right = [_marked("ins", "".join(b[j1:j2]), tag == "equal") for tag, _, _, j1, j2 in opcodes]
    # Every piece above is escaped text inside our own two tags.
    return SideBySide(mark_safe("".join(left)), mark_safe("".join(right)), old != new, cut)


def _marked(element: str, words: str, equal: bool) -> str:
    """``words`` escaped, inside ``<del>`` or ``<ins>`` unless they are the same on both sides."""
    return escape(words) if equal or not words else f"<{element}>{escape(words)}</{element}>"
