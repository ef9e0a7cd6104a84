"""The one way a datetime is shown to a person: local time (``TIME_ZONE``) with seconds, in
the active language's ``DATETIME_FORMAT`` (``studyqueue/formats/<language>``), so that a
page or a command's output never shows ``2026-12-01 14:17:29`` beside
``2026년 12월 1일 14:17:28``. Django's own admin cells use the same format (its list and
read-only fields localise with ``DATETIME_FORMAT``; ``SHORT_DATETIME_FORMAT`` is the same in
our format modules). Machine output (JSON, CSV, logs) keeps ISO 8601."""

from __future__ import annotations

from datetime import datetime

from django.utils import formats, timezone

FORMAT = "DATETIME_FORMAT"


def shown(moment: datetime | None, empty: str = "-") -> str:
    """``moment`` as people read it; ``empty`` for none."""
    if moment is None:
        return empty
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return formats.date_format(local, FORMAT)
