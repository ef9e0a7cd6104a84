"""The numbers behind the admin's queue dashboard, computed with index-friendly queries.

Nothing here counts the whole job table: active jobs are counted through their partial
indexes, finished jobs over the last 24 hours through the ``completed_at`` index, and the
table's total is PostgreSQL's planner estimate (an exact count on SQLite).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections, router
from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.models import ACTIVE_STATUSES, JobStatus, StudyQuestionJob

Job = StudyQuestionJob


@dataclass
class HourBucket:
    """One hour of the last 24: finished jobs and LLM time."""

    start: datetime
    completed: int = 0
    failed: int = 0
    llm_ms: int = 0


@dataclass
class DashboardStats:
    """Everything the dashboard shows."""

    now: datetime
    active: dict[str, dict[str, int]]  # status -> kind -> count (pending, processing)
    finished_24h: dict[str, dict[str, int]]  # status -> kind -> count (completed, failed, skipped)
    oldest_pending_age: timedelta | None
    stale: int
    hours: list[HourBucket]
    top_errors: list[tuple[str, int]]
    total_estimate: int
    total_is_estimate: bool

    @property
    def max_hour_jobs(self) -> int:
        return max((h.completed + h.failed for h in self.hours), default=0)

    @property
    def max_hour_llm_ms(self) -> int:
        return max((h.llm_ms for h in self.hours), default=0)

    @property
    def max_error_count(self) -> int:
        return max((n for _, n in self.top_errors), default=0)


def _by_status_kind(rows) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row["status"], {})[row["kind"]] = row["n"]
    return out


def _table_total(db: str) -> tuple[int, bool]:
    connection = connections[db]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [Job._meta.db_table],
            )
            row = cursor.fetchone()
        if row and row[0] >= 0:
            return int(row[0]), True
    return Job.objects.using(db).count(), False


def collect(now: datetime | None = None) -> DashboardStats:
    """Compute the dashboard's numbers."""
    now = now or timezone.now()
    db = router.db_for_read(Job)
    jobs = Job.objects.using(db).order_by()
    since = now - timedelta(hours=24)

    active = _by_status_kind(
        jobs.filter(status__in=ACTIVE_STATUSES).values("status", "kind").annotate(n=Count("id"))
    )
    recent = jobs.filter(completed_at__gte=since)
    finished = _by_status_kind(recent.values("status", "kind").annotate(n=Count("id")))

    oldest = jobs.pending().aggregate(oldest=Min("created_at"))["oldest"]
    stale = jobs.stale(now - timedelta(minutes=conf.STALE_MINUTES)).count()

    this_hour = now.replace(minute=0, second=0, microsecond=0)
    buckets = {
        this_hour - timedelta(hours=h): HourBucket(this_hour - timedelta(hours=h))
        for h in range(23, -1, -1)
    }
    per_hour = (
        recent.annotate(hour=TruncHour("completed_at"))
        .values("hour")
        .annotate(
            completed=Count("id", filter=Q(status=JobStatus.COMPLETED)),
            failed=Count("id", filter=Q(status=JobStatus.FAILED)),
            llm_ms=Sum("llm_ms"),
        )
    )
    for row in per_hour:
        bucket = buckets.get(row["hour"])
        if bucket is not None:
            bucket.completed = row["completed"]
            bucket.failed = row["failed"]
            bucket.llm_ms = row["llm_ms"] or 0

    # Errors seen in the last 24 hours: finished jobs, plus pending ones waiting to retry.
    errors = (
        jobs.filter(Q(completed_at__gte=since) | Q(status=JobStatus.PENDING))
        .exclude(error_code="")
        .values("error_code")
        .annotate(n=Count("id"))
        .order_by("-n", "error_code")[:5]
    )
    total, is_estimate = _table_total(db)
    return DashboardStats(
        now=now,
        active=active,
        finished_24h=finished,
        oldest_pending_age=(now - oldest) if oldest else None,
        stale=stale,
        hours=list(buckets.values()),
        top_errors=[(row["error_code"], row["n"]) for row in errors],
        total_estimate=total,
        total_is_estimate=is_estimate,
    )
