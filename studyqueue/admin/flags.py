"""Quality flags as people read them: a labelled badge per flag, its meaning on hover
(``flag_badges``, also ``{% flag_badges %}``), and the stated answer beside the key."""

from __future__ import annotations

from collections.abc import Iterable

from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from studyqueue.admin.labels import flag_label
from studyqueue.explanations.quality import MEANINGS, QualityFlag

# Badge colours per flag, the worst reddest; a test checks that every flag has one.
FLAG_COLOURS: dict[str, str] = {
    QualityFlag.TRUNCATED: "#b45309",
    QualityFlag.UNFINISHED: "#b45309",
    QualityFlag.TOO_SHORT: "#64748b",
    QualityFlag.WRONG_SCRIPT: "#7c3aed",
    QualityFlag.ANSWER_MISMATCH: "#dc2626",
    QualityFlag.NO_ANSWER_STATED: "#d97706",
    QualityFlag.QUESTION_CHANGED: "#0369a1",
    QualityFlag.VERIFIER_DISAGREES: "#be123c",
    QualityFlag.VERIFIER_UNSURE: "#a16207",
}
_UNKNOWN_COLOUR = "#6b7280"  # a flag this version does not know (stored by a newer one)


def flag_badges(flags: Iterable[object] | None) -> SafeString:
    """Flags as labelled badges with their meaning on hover; a dash for none (or a non-list)."""
    shown = map(str, flags) if isinstance(flags, list | tuple) else ()
    badges = [
        {
            "value": flag,
            "label": flag_label(flag),
            "meaning": str(MEANINGS.get(flag, "")),
            "colour": FLAG_COLOURS.get(flag, _UNKNOWN_COLOUR),
        }
        for flag in shown
    ]
    return SafeString(render_to_string("admin/studyqueue/flag_badges.html", {"badges": badges}))


def stated_beside_key(stated: str, key: str, flags: Iterable[object] | None) -> SafeString:
    """The answer a reply states, then the question's key, then the answer flag if any:
    ``② · key: 서울``; "none read" when the reply stated none."""
    answer_flags = [
        flag
        for flag in (flags if isinstance(flags, list | tuple) else [])
        if flag in (QualityFlag.ANSWER_MISMATCH, QualityFlag.NO_ANSWER_STATED)
    ]
    return format_html(
        '<span class="sq-stated">{}</span> · {} {}',
        stated or gettext("none read"),
        gettext("key: %(key)s") % {"key": key or gettext("none")},
        flag_badges(answer_flags) if answer_flags else "",
    )
