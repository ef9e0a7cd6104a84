"""The numbers behind the admin's queue dashboard, computed with index-friendly queries.

Nothing here counts the whole job table: active jobs are counted through their partial
indexes, finished jobs over the last 24 hours through the ``completed_at`` index, and the
table's total is PostgreSQL's planner estimate (an exact count on SQLite).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections, router
from django.db.models import Avg, Count, Min, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.models import (
    ACTIVE_STATUSES,
    ErrorCode,
    JobStatus,
    QuestionQuerySet,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
)
from studyqueue.presence import ConsumerState, consumer_states
from studyqueue.prompts import current_version

Job = StudyQuestionJob


@dataclass
class HourBucket:
    """One hour of the last 24: finished jobs and LLM time."""

    start: datetime
    completed: int = 0
    failed: int = 0
    llm_ms: int = 0
    first_token_ms: float | None = None  # mean over completed jobs
    tokens_per_second: float | None = None  # mean over completed jobs


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
    consumers: list[ConsumerState]
    pauses: list[QueuePause]
    outdated: int  # explanations another prompt version wrote (counted up to OUTDATED_CAP)
    needs_review: int  # current explanations with a quality flag (same cap)

    @property
    def live_consumers(self) -> list[ConsumerState]:
        return [c for c in self.consumers if c.state == "live"]

    @property
    def llm_unreachable_since(self) -> datetime | None:
        """When every live consumer finds the LLM server down (breaker open on
        ``llm_unavailable``): since the earliest of them; None otherwise."""
        live = self.live_consumers
        if not live or not all(
            c.record.breaker_open and c.record.breaker_error == ErrorCode.LLM_UNAVAILABLE
            for c in live
        ):
            return None
        return min((c.record.breaker_since or self.now for c in live), default=None)

    @property
    def max_hour_first_token_ms(self) -> float:
        return max((h.first_token_ms or 0 for h in self.hours), default=0)

    @property
    def max_hour_tokens_per_second(self) -> float:
        return max((h.tokens_per_second or 0 for h in self.hours), default=0)

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
            first_token_ms=Avg("llm_first_token_ms", filter=Q(status=JobStatus.COMPLETED)),
            tokens_per_second=Avg("llm_tokens_per_second", filter=Q(status=JobStatus.COMPLETED)),
        )
    )
    for row in per_hour:
        bucket = buckets.get(row["hour"])
        if bucket is not None:
            bucket.completed = row["completed"]
            bucket.failed = row["failed"]
            bucket.llm_ms = row["llm_ms"] or 0
            bucket.first_token_ms = row["first_token_ms"]
            bucket.tokens_per_second = row["tokens_per_second"]

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
        consumers=consumer_states(now),
        pauses=list(QueuePause.objects.using(db).all()),
        outdated=_capped(StudyQuestion.objects.using(db).outdated(current_version().hash)),
        needs_review=_capped(StudyQuestion.objects.using(db).needs_review()),
    )


OUTDATED_CAP = 10_000


def _capped(questions: QuestionQuerySet) -> int:
    """How many, counted up to ``OUTDATED_CAP`` (never a full count of a huge table)."""
    return questions.order_by().values("pk")[:OUTDATED_CAP].count()
