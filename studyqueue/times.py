"""The one way a datetime is shown to a person: local time (``TIME_ZONE``) with seconds, in the
active language's ``DATETIME_FORMAT`` (``studyqueue/formats/<language>``), as Django's own admin
cells show it. Machine output (JSON, CSV, logs) keeps ISO 8601."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import formats, timezone
from django.utils.translation import gettext

# A day's margin both ends: shown in any other zone, a moment within still is a date.
_EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
_LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def in_range(moment: datetime) -> bool:
    """Whether the aware ``moment`` can be stored and shown in any time zone."""
    try:
        return _EARLIEST <= moment.astimezone(UTC) <= _LATEST
    except OverflowError:
        return False


def shown(moment: datetime | None) -> str:
    """``moment`` as people read it; ``-`` for none."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return formats.date_format(local, "DATETIME_FORMAT")


def local_iso(moment: datetime | None) -> str | None:
    """``moment`` in ISO 8601 with the offset of ``TIME_ZONE``, as exports write it; None."""
    return timezone.localtime(moment).isoformat() if moment is not None else None


def short_duration(delta: timedelta) -> str:
    """A compact age or duration for a table cell: 189 ms, 45s, 12m, 3h 5m, 4d."""
    exact = max(delta.total_seconds(), 0)
    if exact < 1:
        return gettext("%(ms)d ms") % {"ms": int(exact * 1000)}
    seconds = int(exact)
    if seconds < 120:
        return gettext("%(seconds)ds") % {"seconds": seconds}
    if seconds < 7200:
        return gettext("%(minutes)dm") % {"minutes": seconds // 60}
    if seconds < 172800:
        return gettext("%(hours)dh %(minutes)dm") % {
            "hours": seconds // 3600,
            "minutes": seconds % 3600 // 60,
        }
    return gettext("%(days)dd") % {"days": seconds // 86400}
