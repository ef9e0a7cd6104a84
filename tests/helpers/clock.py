"""Times for tests that place data in the dashboard's hourly buckets: chosen so that what a
test puts in a bucket stays there whatever the minute the test runs at (a completion "5
minutes ago" is in the previous hour's bar from hh:00 to hh:05)."""

from __future__ import annotations

from datetime import datetime, timedelta

HOUR = timedelta(hours=1)


def hour_of(when: datetime) -> datetime:
    """The start of the hourly bucket ``when`` falls in (as ``stats.hourly`` cuts them)."""
    return when.replace(minute=0, second=0, microsecond=0)


def in_hour(now: datetime, hours_ago: int, share: float = 0.5) -> datetime:
    """A time ``share`` of the way through the bucket ``hours_ago`` hours before ``now``'s
    (0: ``now``'s own), counting only the part of it that has passed: never after ``now``,
    never in a neighbouring bucket."""
    start = hour_of(now) - hours_ago * HOUR
    end = min(start + HOUR, now)
    return start + (end - start) * share


def middle_of_last_full_hour(now: datetime) -> datetime:
    """A reference time 30 minutes from either edge of its bucket, and before ``now``: a
    clock stopped there keeps a test's "now" in the newest bar for half an hour."""
    return hour_of(now) - HOUR / 2
