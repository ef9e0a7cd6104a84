"""Prompt versions compared, over the LLM's revisions (never a reviewer's correction): per
version, what it wrote, the share with each flag, length, tokens, speed and the reviews.
Behind the dashboard's table."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, Max, Min, Q, QuerySet
from django.db.models.functions import Length

from studyqueue.explanations import revisions
from studyqueue.models import ExplanationRevision, ReviewStatus

DASHBOARD_NEWEST = 50_000  # the dashboard compares over this many newest explanations


def flag_order(name: str) -> tuple[int, str]:
    """Sort key: ``answer_mismatch``, then the known flags in order, then the others."""
    known: list[str] = [revisions.ANSWER_MISMATCH, *revisions.FLAGS]
    return (known.index(name), name) if name in known else (len(known), name)


@dataclass
class VersionStats:
    """One prompt version's numbers."""

    prompt_version: str
    label: str
    written: int
    first_at: datetime | None
    last_at: datetime | None
    mean_chars: float | None
    mean_completion_tokens: float | None
    tokens_per_second: float | None
    reviewed: int
    approved: int
    rejected: int
    edited: int
    flagged: dict[str, int] = field(default_factory=dict)  # flag -> explanations with it

    @property
    def flag_shares(self) -> list[tuple[str, float]]:
        """Each flag's share of the explanations written, in ``flag_order``."""
        return [
            (name, self.flagged[name] / self.written)
            for name in sorted(self.flagged, key=flag_order)
        ]

    def _rate(self, count: int) -> float | None:
        return count / self.reviewed if self.reviewed else None

    @property
    def approval_rate(self) -> float | None:
        """Approved over reviewed (None before any review)."""
        return self._rate(self.approved)

    @property
    def rejection_rate(self) -> float | None:
        """Rejected over reviewed (None before any review)."""
        return self._rate(self.rejected)


def newest_edge(queryset: QuerySet[Any], newest: int | None) -> int:
    """The smallest id among the ``newest`` rows (0: all): an id range, no count."""
    if newest is None:
        return 0
    edge = queryset.order_by("-pk").values_list("pk", flat=True)[newest - 1 : newest]
    return edge.first() or 0


def written(newest: int | None = None) -> QuerySet[ExplanationRevision]:
    """The LLM's revisions, all or the ``newest``."""
    revisions = ExplanationRevision.objects.filter(author="").order_by()
    return revisions.filter(pk__gte=newest_edge(revisions, newest))


def collect(newest: int | None = None) -> list[VersionStats]:
    """Every prompt version's numbers, the newest version first."""
    revisions = written(newest)
    rows = revisions.values("prompt_version").annotate(
        written=Count("id"),
        label=Max("prompt_label"),
        first_at=Min("created_at"),
        last_at=Max("created_at"),
        mean_chars=Avg(Length("text")),
        mean_completion_tokens=Avg("completion_tokens"),
        tokens_per_second=Avg("tokens_per_second"),
        reviewed=Count("id", filter=~Q(review_status=ReviewStatus.UNREVIEWED)),
        approved=Count("id", filter=Q(review_status=ReviewStatus.APPROVED)),
        rejected=Count("id", filter=Q(review_status=ReviewStatus.REJECTED)),
        edited=Count("id", filter=Q(review_status=ReviewStatus.EDITED)),
    )
    versions = {row["prompt_version"]: VersionStats(**row) for row in rows}
    # One row per (version, list of flags) that occurs: few, whatever the table's size.
    combos = revisions.exclude(flags=[]).values("prompt_version", "flags").annotate(n=Count("id"))
    for combo in combos:
        if (version := versions.get(combo["prompt_version"])) is None:
            continue  # first written since the numbers above were read
        for name in set(combo["flags"] or []):
            version.flagged[str(name)] = version.flagged.get(str(name), 0) + combo["n"]
    return sorted(
        versions.values(),
        key=lambda v: (v.last_at is not None, v.last_at or datetime.min),
        reverse=True,
    )
