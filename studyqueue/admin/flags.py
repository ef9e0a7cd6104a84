"""Quality flags as people read them: a labelled badge per flag, its meaning on hover
(``flag_badges``, also ``{% flag_badges %}``), and the stated answer beside the key."""

from __future__ import annotations

from collections.abc import Iterable

from django.template.loader import render_to_string
from django.utils.functional import Promise
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_lazy

from studyqueue.admin.labels import flag_label
from studyqueue.explanations.revisions import MEANINGS, QualityFlag
from studyqueue.sessions import summaries

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
    QualityFlag.WRONG_STEP: "#9f1239",
    QualityFlag.STEP_CHECK_UNSURE: "#a16207",
}
# A session summary's flags (``sessions.summaries.check``): their labels and meanings.
SUMMARY_FLAGS: dict[str, tuple[Promise, Promise, str]] = {
    summaries.SCORE_MISMATCH: (
        gettext_lazy("score mismatch"),
        gettext_lazy("The score the summary states is not the session's."),
        "#dc2626",
    ),
    summaries.NO_SCORE_STATED: (
        gettext_lazy("no score stated"),
        gettext_lazy("The summary states no score that could be read."),
        "#d97706",
    ),
    summaries.WRONG_QUESTION: (
        gettext_lazy("wrong question"),
        gettext_lazy("The summary says a question was missed that was answered right."),
        "#be123c",
    ),
    summaries.MISSED_NOT_MENTIONED: (
        gettext_lazy("missed not mentioned"),
        gettext_lazy("A question the learner missed is never named in the summary."),
        "#b45309",
    ),
    summaries.FIGURE_MISMATCH: (
        gettext_lazy("figure mismatch"),
        gettext_lazy("A tag's count or a time the summary states is not the session's."),
        "#9f1239",
    ),
}
_UNKNOWN_COLOUR = "#6b7280"  # a flag this version does not know (stored by a newer one)


def flag_badges(flags: Iterable[object] | None) -> SafeString:
    """Flags as labelled badges with their meaning on hover; a dash for none (or a non-list)."""
    shown = map(str, flags) if isinstance(flags, list | tuple) else ()
    badges = []
    for flag in shown:
        label, meaning, colour = SUMMARY_FLAGS.get(flag) or (
            flag_label(flag),
            MEANINGS.get(flag, ""),
            FLAG_COLOURS.get(flag, _UNKNOWN_COLOUR),
        )
        badges.append({"value": flag, "label": label, "meaning": meaning, "colour": colour})
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
