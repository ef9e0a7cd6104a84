"""Flags a reviewer can trust: each flag scored, per prompt version, as a predictor of a
rejection (precision and recall with a 95 % Wilson interval; docs/howto/checks.md, "Flags you
can trust"). A reviewed explanation is *bad* when rejected or edited, *good* when approved."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count

from studyqueue.explanations import key_audit, prompt_versions, revisions
from studyqueue.models import QUESTION_CHANGED_FLAG, ReviewStatus

MIN_DECISIONS = 20
_Z = 1.959964  # the normal quantile of a two-sided 95 % interval
BAD = (ReviewStatus.REJECTED, ReviewStatus.EDITED)
#: Scored besides each flag: "any flag at all".
ANY = "any"


@dataclass(frozen=True)
class Rate:
    """``hits`` out of ``total``, with a 95 % Wilson score interval."""

    hits: int
    total: int

    @property
    def enough(self) -> bool:
        """At least ``MIN_DECISIONS`` decisions behind it: worth a number."""
        return self.total >= MIN_DECISIONS

    @property
    def interval(self) -> tuple[float, float] | None:
        """The Wilson score interval (it stays inside 0..1 and is honest near 0 and 1)."""
        if not self.total:
            return None
        n, p = self.total, self.hits / self.total
        centre = p + _Z * _Z / (2 * n)
        spread = _Z * math.sqrt(p * (1 - p) / n + _Z * _Z / (4 * n * n))
        scale = 1 + _Z * _Z / n
        return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


@dataclass(frozen=True)
class FlagTrust:
    """One flag against the reviewers' decisions on one prompt version's explanations."""

    flag: str
    flagged_bad: int
    flagged_good: int
    unflagged_bad: int
    unflagged_good: int

    @property
    def precision(self) -> Rate:
        return Rate(self.flagged_bad, self.flagged_bad + self.flagged_good)

    @property
    def recall(self) -> Rate:
        return Rate(self.flagged_bad, self.flagged_bad + self.unflagged_bad)


# The flags scored: the reply's own and the verifier's (``question_changed`` is set on the
# question, never on a reply), then any flag at all.
SCORED = (*(flag.value for flag in revisions.FLAGS if flag != QUESTION_CHANGED_FLAG), ANY)


def collect(newest: int | None = None) -> dict[str, list[FlagTrust]]:
    """Per prompt version, each scored flag against the reviewers' decisions."""
    reviewed = prompt_versions.written(newest).exclude(review_status=ReviewStatus.UNREVIEWED)
    # One row per (version, flags list, decision) that occurs: few, whatever the table's size.
    rows = reviewed.values("prompt_version", "flags", "review_status").annotate(n=Count("id"))
    counts: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {flag: [0, 0, 0, 0] for flag in SCORED}
    )
    for row in rows:
        flags = {str(name) for name in row["flags"] or []}
        bad = row["review_status"] in BAD
        for flag in SCORED:
            flagged = bool(flags) if flag == ANY else flag in flags
            slot = (0 if bad else 1) if flagged else (2 if bad else 3)
            counts[row["prompt_version"]][flag][slot] += row["n"]
    return {
        version: [FlagTrust(flag, *by_flag[flag]) for flag in SCORED]
        for version, by_flag in counts.items()
    }


def of(trust: dict[str, list[FlagTrust]], version: str) -> list[FlagTrust]:
    """A version's scores from ``collect``: every scored flag, at zero before any decision."""
    return trust.get(version) or [FlagTrust(flag, 0, 0, 0, 0) for flag in SCORED]


def key_disputes() -> Rate:
    """The key audit's precision: of the disputes decided, those where the model was right."""
    rates = key_audit.rates()
    return Rate(rates.upheld, rates.upheld + rates.kept)
