"""The dashboard's hourly charts: one row of 24 thin bars per metric (CSS only), each bar
with its value as text (the hover title, and the row's accessible label)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext

from studyqueue.monitoring.stats import DashboardStats, HourBucket

NONE = "\u2013"  # an en dash: no value that hour


@dataclass(frozen=True)
class Bar:
    # Its coloured pieces: {"pct": height in percent of the row's largest bar, "css": class}.
    parts: list[dict[str, Any]]
    text: str  # the hour and its value, for people and screen readers


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    total: str  # the row's figure at a glance (a sum over 24 h, or the last hour's mean)
    bars: list[Bar]

    @property
    def label(self) -> str:
        """The row as text: its title and every hour with a value."""
        shown = "; ".join(bar.text for bar in self.bars if bar.parts)
        shown = shown or gettext("nothing in the last 24 hours")
        return f"{self.title}: {shown}"


def pct(value: float, top: float) -> float:
    return round(100.0 * value / top, 1) if top else 0.0


def _hour(bucket: HourBucket) -> str:
    return timezone.localtime(bucket.start).strftime("%H:00")  # the hour, local


def _llm_seconds(ms: float) -> str:
    return gettext("%(seconds)s s") % {"seconds": round(ms / 1000, 1)}


def _chart(
    stats: DashboardStats,
    id: str,
    title: str,
    value: Callable[[HourBucket], float | None],
    shown: Callable[[float], str],
    total: str | None = None,
) -> Chart:
    """A row of one value per hour, styled as ``id``; its figure ``total``, else the newest."""
    values = [value(h) for h in stats.hours]
    top = max((v or 0 for v in values), default=0)
    bars = [
        Bar(
            [{"pct": pct(v, top), "css": id}] if v else [],
            f"{_hour(h)}: {shown(v) if v is not None else NONE}",
        )
        for h, v in zip(stats.hours, values, strict=True)
    ]
    if total is None:
        latest = next((v for v in reversed(values) if v is not None), None)
        total = NONE if latest is None else gettext("last: %(value)s") % {"value": shown(latest)}
    return Chart(id, title, total, bars)


def hourly_charts(stats: DashboardStats) -> list[Chart]:
    """Finished jobs, LLM time, time to first token and tokens/s over the last 24 hours."""
    top_jobs = max((h.completed + h.failed for h in stats.hours), default=0)
    finished = [
        Bar(
            [
                {"pct": pct(n, top_jobs), "css": css}
                for n, css in ((h.completed, "sq-ok"), (h.failed, "sq-bad"))
                if n
            ],
            gettext("%(hour)s: %(completed)s / %(failed)s")
            % {"hour": _hour(h), "completed": h.completed, "failed": h.failed},
        )
        for h in stats.hours
    ]
    completed = sum(h.completed for h in stats.hours)
    failed = sum(h.failed for h in stats.hours)
    llm_total = _llm_seconds(sum(h.llm_ms for h in stats.hours))
    chart = functools.partial(_chart, stats)
    return [
        Chart(
            "sq-throughput",
            gettext("Finished per hour: completed / failed"),
            f"{completed} / {failed}",
            finished,
        ),
        chart("sq-llm", gettext("LLM time per hour"), lambda h: h.llm_ms, _llm_seconds, llm_total),
        chart(
            "sq-ttft",
            gettext("Time to first token (hourly mean)"),
            lambda h: None if h.first_token_ms is None else h.first_token_ms / 1000,
            lambda v: gettext("%(seconds).2f s") % {"seconds": v},
        ),
        chart(
            "sq-tps",
            gettext("Tokens per second (hourly mean)"),
            lambda h: h.tokens_per_second,
            lambda v: f"{v:.1f}",
        ),
    ]
