"""Codes as an operator reads them (quality flags, the gate's change reasons): the codes stay
in the data and the logs; pages and commands show these labels. An unknown code shows as it is."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_lazy

from studyqueue.explanations.revisions import QualityFlag

# The gate's reasons (``services.gate_control.Reason``), and what each says happened.
GATE_REASONS: dict[str, Promise] = {
    "climb": gettext_lazy("raised: more calls paid"),
    "step_back": gettext_lazy("stepped back to the best limit"),
    "probe_down": gettext_lazy("lowered to see whether fewer calls do as well"),
    "loss": gettext_lazy("halved: the server was overloaded or failed"),
    "shared": gettext_lazy("set by another consumer"),
    "restored": gettext_lazy("restored from the last run"),
}


def flag_label(name: object) -> str:
    """A quality flag's label (``too_short`` -> "too short", translated)."""
    text = str(name)
    return str(QualityFlag(text).label) if text in QualityFlag.values else text


def flag_labels(flags: Iterable[object] | None) -> str:
    """Flags as a comma-separated line of labels; "none" for none."""
    return ", ".join(flag_label(flag) for flag in flags or ()) or gettext("none")


def gate_reason(code: object) -> str:
    """Why the gate's limit last changed, in words."""
    text = str(code or "")
    return str(GATE_REASONS[text]) if text in GATE_REASONS else text
