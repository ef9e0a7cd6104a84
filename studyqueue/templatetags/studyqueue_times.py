"""``{% load studyqueue_times %}{{ value|when }}``: a datetime in the one format
(``studyqueue.times.shown``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template

from studyqueue import times

register = template.Library()


@register.filter(expects_localtime=False)
def when(value: datetime | None) -> str:
    """Local time with seconds, the active language's one format; "-" for none."""
    return times.shown(value if isinstance(value, datetime) else None)


@register.filter
def duration(value: timedelta | None) -> str:
    """A duration as the tables show it: 45s, 12m, 3h 5m (``times.short_duration``)."""
    return times.short_duration(value) if isinstance(value, timedelta) else "-"
