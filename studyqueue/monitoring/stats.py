"""The queue's numbers: the one collector behind the admin dashboard, its JSON view and the
Prometheus metrics. Nothing here counts the whole job table: active jobs go through their
partial indexes, the last 24 hours through the ``completed_at`` index, and the table's total
is PostgreSQL's planner estimate (an exact count on SQLite)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Avg, Count, F, FilteredRelation, Max, Min, Q, Sum
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone
from django.utils.translation import gettext

from studyqueue.conf import AUTO, conf
from studyqueue.explanations import review_queue
from studyqueue.explanations.outdated import Basis, basis
from studyqueue.models import (
    ACTIVE_STATUSES,
    ErrorCode,
    GateLimit,
    JobAttempt,
    JobKind,
    JobQuerySet,
    JobStatus,
    Outcome,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
    delivery_kinds,
)
from studyqueue.queue import sql
from studyqueue.queue.presence import ConsumerState, consumer_states, gate_url, reported_endpoints
from studyqueue.services import gate_limits
from studyqueue.sets import eta, question_sets

WINDOW = timedelta(hours=24)
# The backlog's estimate divides by the jobs completed over this last stretch.
RATE_WINDOW = timedelta(hours=1)
LATE_SETS_SHOWN = 20  # sets with a deadline looked at by the dashboard, earliest first
OUTDATED_CAP = 10_000
TOP_ERRORS = 5
NOTICE_STORM = 3  # webhook deliveries refused in a row (none through): the dashboard warns


@dataclass
class HourBucket:
    """One hour of the last 24: finished jobs and LLM time."""

    start: datetime
    completed: int = 0
    failed: int = 0
    llm_ms: int = 0
    first_token_ms: float | None = None  # mean over completed jobs
    tokens_per_second: float | None = None  # mean over completed jobs


@dataclass(frozen=True)
class LLMCalls:
    """The LLM call times of the jobs completed in the window, as a cumulative histogram."""

    at_most: dict[float, int]  # bound in seconds -> calls that took at most that long
    count: int
    total_ms: int


@dataclass(frozen=True)
class TokenTotals:
    """Tokens of the replies that completed jobs in the window."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0  # prompt tokens served from the server's prompt cache
    prompt_reported: int = 0  # prompt tokens of the replies that said how many were cached

    @property
    def cached_share(self) -> float | None:
        """Cached over prompt tokens of the replies that said (None: none did; no cold cache)."""
        return self.cached / self.prompt_reported if self.prompt_reported else None

    @property
    def cached_percent(self) -> str | None:
        """The share for people ("87 %"); None when unknown."""
        share = self.cached_share
        return None if share is None else f"{share * 100:.0f} %"


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
    outdated: int  # explanations no live consumer's prompt version wrote (up to OUTDATED_CAP)
    outdated_basis: Basis  # the versions ``outdated`` is counted against, and whose they are
    needs_review: int  # explanations waiting for a reviewer: unreviewed, or a candidate (same cap)
    needs_review_flagged: int  # of them, those with a quality flag (same cap)
    tokens: TokenTotals
    gate_limits: list[GateLimit]  # GATE_PERMITS=auto: each endpoint's limit and tokens/s
    endpoints: list[EndpointRow] = field(default_factory=list)  # each LLM server in use
    rate: eta.Rate | None = None  # what the servers did for explanations lately
    # The question sets that will miss their deadline at the current rate.
    late_sets: list[question_sets.Progress] = field(default_factory=list)
    completed_recently: int = 0  # jobs completed over the last RATE_WINDOW
    # Per worker id, from the jobs table now (a consumer's own counts are a cycle old).
    running_by_worker: dict[str, int] = field(default_factory=dict)  # processing jobs
    completed_by_worker: dict[str, int] = field(default_factory=dict)  # completed in WINDOW
    notices: NoticeFailures | None = None  # the notices' deliveries failing now
    # Per kind, the last hour's jobs: seconds waited once due and run, (median, 95th).
    durations: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    @property
    def live_consumers(self) -> list[ConsumerState]:
        return [c for c in self.consumers if c.live]

    @property
    def backlog(self) -> int:
        """Jobs still to run: pending and processing, every kind."""
        return sum(n for status in ACTIVE_STATUSES for n in self.active.get(status, {}).values())

    @property
    def completed_per_hour(self) -> float:
        return self.completed_recently / (RATE_WINDOW / timedelta(hours=1))

    @property
    def explanations_waiting(self) -> int:
        """Explanation jobs still to run (pending and processing)."""
        return sum(
            self.active.get(status, {}).get(JobKind.EXPLANATION, 0) for status in ACTIVE_STATUSES
        )

    @property
    def backlog_done_in(self) -> timedelta | None:
        """How long the explanations waiting take at the servers' recent rate (``eta``); None
        without an estimate. The checks beside them take a few tokens each."""
        if not self.explanations_waiting or self.rate is None or self.no_estimate:
            return None
        return timedelta(seconds=self.rate.seconds_for(self.explanations_waiting))

    @property
    def no_estimate(self) -> str:
        """Why explanations wait with a recent rate but no estimate ("": there is one). A rate
        measured before the servers went down is no rate of what they do now."""
        if self.rate is None or not self.explanations_waiting:
            return ""
        if self.llm_unreachable_since is not None or (
            self.endpoints and all(e.state == "down" for e in self.endpoints)
        ):
            return gettext("no estimate: every LLM server is failing, so nothing is written")
        if not self.rate.usable:
            return gettext("no estimate: the LLM servers wrote under 1 tok/s lately")
        return ""

    def shared_limit(self, consumer: ConsumerState) -> GateLimit | None:
        """The stored limit a ``GATE_PERMITS=auto`` consumer's gate follows (None: none)."""
        if consumer.record.gate_permits != AUTO:
            return None
        endpoint = gate_limits.key(gate_url(consumer.record))  # the row as the gate stores it
        return next((g for g in self.gate_limits if g.endpoint == endpoint), None)

    def gate_limit_of(self, consumer: ConsumerState) -> int | None:
        """The concurrent calls a consumer's gate allows now: its endpoint's shared stored
        limit, else what the consumer last reported (fixed permits do not move)."""
        shared = self.shared_limit(consumer)
        return shared.limit if shared is not None else consumer.record.gate_limit

    @property
    def live_gate_limits(self) -> list[int]:
        """The distinct concurrent calls the live consumers' gates allow now."""
        limits = (self.gate_limit_of(c) for c in self.live_consumers)
        return sorted({n for n in limits if n})

    @property
    def llm_unreachable_since(self) -> datetime | None:
        """Since when every live consumer finds the LLM server down (``llm_unavailable``)."""
        live = self.live_consumers
        if not live or not all(
            c.record.breaker_open and c.record.breaker_error == ErrorCode.LLM_UNAVAILABLE
            for c in live
        ):
            return None
        return min((c.record.breaker_since or self.now for c in live), default=None)

    @property
    def llm_rejecting(self) -> list[EndpointRow]:
        """The servers paused for rejecting every call (a wrong URL or model, a bad key)."""
        return [
            e for e in self.endpoints if e.state == "down" and e.error == ErrorCode.LLM_REJECTED
        ]


def jobs() -> JobQuerySet:
    """Every job, unordered, on the queue's database."""
    return StudyQuestionJob.objects.order_by()


def recent(now: datetime) -> JobQuerySet:
    """Jobs that ended in the 24 hours before ``now`` (the ``completed_at`` index)."""
    return jobs().filter(completed_at__gte=now - WINDOW)


def replies(now: datetime) -> JobQuerySet:
    """``recent(now)``, each job with ``reply``: the revision that completed it. The join reads
    only revisions from the oldest of those replies on (a primary key range), not the whole
    history; the FILTER keeps MIN from walking the ``revision_id`` index."""
    jobs = recent(now)
    has_reply = Q(revision__isnull=False)
    oldest = jobs.aggregate(first=Min("revision_id", filter=has_reply))["first"] or 0
    return jobs.annotate(reply=FilteredRelation("revision", condition=Q(revision__pk__gte=oldest)))


def by_status_kind(counts: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """(status, kind, count) rows summed as status -> kind -> count."""
    out: dict[str, dict[str, int]] = {}
    for status, kind, n in counts:
        per_kind = out.setdefault(status, {})
        per_kind[kind] = per_kind.get(kind, 0) + n
    return out


def active_counts() -> dict[str, dict[str, int]]:
    """Pending and processing jobs now: status -> kind -> count (partial indexes)."""
    rows = jobs().filter(status__in=ACTIVE_STATUSES).values_list("status", "kind")
    return by_status_kind(rows.annotate(n=Count("id")))


def finished_counts(now: datetime) -> dict[tuple[str, str, str], int]:
    """Jobs that ended in the last 24 hours: (status, kind, error code) -> count."""
    rows = recent(now).values("status", "kind", "error_code").annotate(n=Count("id"))
    return {(row["status"], row["kind"], row["error_code"]): row["n"] for row in rows}


def _count_by(rows: JobQuerySet, field: str) -> dict[str, int]:
    return {row[field]: row["n"] for row in rows.values(field).annotate(n=Count("id"))}


def waiting_again() -> dict[str, int]:
    """Pending jobs that were released or are to be retried: last error code -> count."""
    return _count_by(jobs().pending().exclude(error_code=""), "error_code")


def oldest_pending() -> datetime | None:
    """When the oldest pending job was created; None when none waits."""
    return jobs().pending().aggregate(t=Min("created_at"))["t"]


def by_worker(now: datetime, workers: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Per worker id: its processing jobs, and the jobs it completed in the last 24 hours."""
    running = jobs().filter(status=JobStatus.PROCESSING, worker_id__in=workers)
    completed = recent(now).filter(status=JobStatus.COMPLETED, worker_id__in=workers)
    return _count_by(running, "worker_id"), _count_by(completed, "worker_id")


def hourly(now: datetime) -> list[HourBucket]:
    """The last 24 hours, oldest first (the completed jobs' means from their revisions)."""
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    starts = [this_hour - timedelta(hours=h) for h in range(23, -1, -1)]
    buckets = {start: HourBucket(start) for start in starts}
    done = Q(status=JobStatus.COMPLETED)
    written = done & Q(kind=JobKind.EXPLANATION)  # a check's revision is the one it checked
    rows = (
        replies(now)
        .annotate(start=TruncHour("completed_at"))
        .values("start")
        .annotate(
            completed=Count("id", filter=done),
            failed=Count("id", filter=Q(status=JobStatus.FAILED)),
            llm_ms=Coalesce(Sum("llm_ms"), 0),
            first_token_ms=Avg("reply__first_token_ms", filter=written),
            tokens_per_second=Avg("reply__tokens_per_second", filter=written),
        )
    )
    for row in rows:
        if row["start"] in buckets:  # not the part of the hour 24 hours ago
            buckets[row["start"]] = HourBucket(**row)
    return list(buckets.values())


def top_errors(
    finished: dict[tuple[str, str, str], int], waiting: dict[str, int]
) -> list[tuple[str, int]]:
    """The commonest error codes of the last 24 hours' finished jobs and of the pending ones
    waiting to retry (a claim clears ``completed_at``: no job is in both)."""
    counts: Counter[str] = Counter(waiting)
    for (_, _, code), n in finished.items():
        if code:
            counts[code] += n
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_ERRORS]


def llm_calls(now: datetime, bounds_seconds: tuple[float, ...]) -> LLMCalls:
    """LLM call times of the jobs completed in the last 24 hours, counted per bound."""
    completed = recent(now).filter(status=JobStatus.COMPLETED, llm_ms__isnull=False)
    counts = completed.aggregate(
        total=Count("id"),
        ms=Sum("llm_ms"),
        **{
            f"le_{n}": Count("id", filter=Q(llm_ms__lte=b * 1000))
            for n, b in enumerate(bounds_seconds)
        },
    )
    return LLMCalls(
        at_most={b: counts[f"le_{n}"] for n, b in enumerate(bounds_seconds)},
        count=counts["total"],
        total_ms=counts["ms"] or 0,
    )


def durations(now: datetime) -> dict[str, dict[str, tuple[float, float]]]:
    """Per kind, for the jobs that ended in the last hour: the seconds each waited once due
    (``wait``: from its ``run_after`` to its last claim) and ran (``run``: from that claim to
    its end), as (median, 95th percentile)."""
    ended = jobs().filter(completed_at__gte=now - timedelta(hours=1), started_at__isnull=False)
    seen: dict[str, dict[str, list[float]]] = {}
    fields = ("kind", "run_after", "started_at", "completed_at")
    for kind, due, started, end in ended.values_list(*fields).iterator():
        phases = seen.setdefault(kind, {"wait": [], "run": []})
        phases["wait"].append(max(0.0, (started - due).total_seconds()))
        phases["run"].append(max(0.0, (end - started).total_seconds()))
    return {kind: {k: _p50_p95(v) for k, v in phases.items()} for kind, phases in seen.items()}


def _p50_p95(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    return statistics.median(values), statistics.quantiles(values, n=20, method="inclusive")[18]


def tokens(now: datetime) -> TokenTotals:
    """Prompt, completion and cached tokens of the replies that completed explanation jobs
    in the last 24 hours (a check's revision is the one it checked: ``tokens_by_kind``)."""
    reported = Q(reply__cached_tokens__isnull=False, reply__prompt_tokens__isnull=False)
    sums = (
        replies(now)
        .filter(kind=JobKind.EXPLANATION)
        .aggregate(
            prompt=Sum("reply__prompt_tokens"),
            completion=Sum("reply__completion_tokens"),
            cached=Sum("reply__cached_tokens", filter=reported),
            prompt_reported=Sum("reply__prompt_tokens", filter=reported),
        )
    )
    return TokenTotals(**{key: value or 0 for key, value in sums.items()})


def tokens_by_kind(now: datetime) -> dict[str, tuple[int, int]]:
    """Prompt and completion tokens of every attempt of the jobs ended in the last 24 h, by kind."""
    attempts = JobAttempt.objects.filter(job__in=recent(now).values("pk")).order_by()
    rows = attempts.values("job__kind").annotate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
    )
    return {row["job__kind"]: (row["prompt"] or 0, row["completion"] or 0) for row in rows}


@dataclass(frozen=True)
class EndpointRow:
    """One LLM server as the live consumers report it, and what it served in the last hour."""

    name: str
    model: str
    state: str  # the worst a live consumer reports: down > probing > up
    down_for: int  # of them, those that find it down
    limit: int | None  # the calls its gates allow now: auto, the shared stored limit; else reported
    tokens_per_second: float | None  # one call's completion tokens/s (the best reported)
    error: str  # the error code of a consumer that finds it down
    detail: str = ""  # that error's message (a wrong URL, a bad key: what to fix)
    ceiling: int | None = None  # the most calls its gate tries (auto), the highest reported
    server: str = ""  # the server's word that set the ceiling (llama.cpp, vllm; "": settings)
    calls_hour: int = 0  # attempts it ended in the last hour, every consumer's
    tokens_hour: int = 0  # their completion tokens
    metrics_fault: str = ""  # why its ``/metrics`` page is unusable, as a consumer read it


_STATE_ORDER = {"up": 0, "probing": 1, "down": 2}


def endpoint_rows(
    consumers: list[ConsumerState], limits: list[GateLimit], now: datetime
) -> list[EndpointRow]:
    """Each LLM server a live consumer uses (``QueueConsumer.endpoints``), in name order."""
    reports: dict[str, list[dict[str, Any]]] = {}
    for state in (c for c in consumers if c.live):
        for entry in reported_endpoints(state.record):
            reports.setdefault(entry["name"], []).append(entry)
    if not reports:
        return []
    stored = {g.endpoint: g.limit for g in limits}
    served = _served_last_hour(now)
    return [
        _endpoint_row(name, entries, stored, served.get(name, (0, 0)))
        for name, entries in sorted(reports.items())
    ]


def _endpoint_row(
    name: str, entries: list[dict[str, Any]], stored: dict[str, int], served: tuple[int, int]
) -> EndpointRow:
    """One server's row from its live consumers' reports of it."""
    worst = max(entries, key=lambda e: _STATE_ORDER.get(str(e.get("state")), 0))
    rates = [e["tokens_per_second"] for e in entries if e.get("tokens_per_second")]
    reported = [e["limit"] for e in entries if isinstance(e.get("limit"), int)]
    auto = [e for e in entries if e.get("auto")]
    ceilings = [e["ceiling"] for e in auto if isinstance(e.get("ceiling"), int)]
    limit = max(reported, default=None)
    return EndpointRow(
        name=name,
        model=str(worst.get("model") or ""),
        state=str(worst.get("state") or "up"),
        down_for=sum(1 for e in entries if e.get("state") == "down"),
        limit=stored.get(gate_limits.key(name), limit) if auto else limit,
        tokens_per_second=max(rates, default=None),
        error=str(worst.get("error") or ""),
        detail=str(worst.get("detail") or ""),
        ceiling=max(ceilings, default=None),
        server=next((str(e["server"]) for e in entries if e.get("server")), ""),
        calls_hour=served[0],
        tokens_hour=served[1],
        metrics_fault=next(
            (str(e["metrics_fault"]) for e in entries if e.get("metrics_fault")), ""
        ),
    )


def _served_last_hour(now: datetime) -> dict[str, tuple[int, int]]:
    """Per server: the attempts it ended in the hour before ``now`` and their completion
    tokens (of the jobs that ended in that hour: the ``completed_at`` index)."""
    ended = jobs().filter(completed_at__gte=now - timedelta(hours=1)).values("pk")
    rows = (
        JobAttempt.objects.filter(job__in=ended, ended_at__gte=now - timedelta(hours=1))
        .exclude(endpoint="")
        .order_by()
        .values("endpoint")
        .annotate(calls=Count("pk"), tokens=Sum("completion_tokens"))
    )
    return {row["endpoint"]: (row["calls"], row["tokens"] or 0) for row in rows}


@dataclass(frozen=True)
class NoticeFailures:
    """The notices' webhook deliveries that failed since the last that went through
    (within ``WINDOW``): refused, or stuck: held until ``WEBHOOK_TIMEOUT_SECONDS``."""

    refused: int
    stuck: int
    since: datetime  # when the first of them started
    budget: float  # WEBHOOK_TIMEOUT_SECONDS

    @property
    def storm(self) -> bool:
        return self.refused >= NOTICE_STORM


def notice_failures(now: datetime) -> NoticeFailures | None:
    """The deliveries failing now (None: none), read through the notices active or ended in
    the window (the partial indexes, the ``completed_at`` one)."""
    active = Q(status__in=ACTIVE_STATUSES) | Q(completed_at__gte=now - WINDOW)
    notices = jobs().filter(active, kind__in=delivery_kinds())
    attempts = JobAttempt.objects.filter(job__in=notices.values("pk"), ended_at__gte=now - WINDOW)
    through = attempts.filter(outcome=Outcome.COMPLETED).aggregate(t=Max("ended_at"))["t"]
    failed = attempts.filter(error_code=ErrorCode.WEBHOOK_FAILED)
    if through is not None:
        failed = failed.filter(ended_at__gt=through)
    budget = conf.WEBHOOK_TIMEOUT_SECONDS
    held = Q(ended_at__gte=F("started_at") + timedelta(seconds=budget))
    found = failed.order_by().aggregate(
        n=Count("pk"), stuck=Count("pk", filter=held), since=Min("started_at")
    )
    if not found["n"]:
        return None
    return NoticeFailures(found["n"] - found["stuck"], found["stuck"], found["since"], budget)


def late_sets(now: datetime) -> list[question_sets.Progress]:
    """The sets with a deadline from a day ago on that are at risk of missing it, earliest
    first (one estimate per such set; sets without one cost nothing)."""
    due = StudyQuestionSet.objects.filter(deadline__gt=now - timedelta(days=1))
    progress = (question_sets.progress(s, now) for s in due.order_by("deadline")[:LATE_SETS_SHOWN])
    return [p for p in progress if p.at_risk]


def table_total() -> tuple[int, bool]:
    """The job table's size: PostgreSQL's estimate (True), or an exact count elsewhere."""
    every = jobs()
    if sql.postgres(every.db):
        with connections[every.db].cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [StudyQuestionJob._meta.db_table],
            )
            row = cursor.fetchone()
        if row and row[0] >= 0:
            return int(row[0]), True
    return every.count(), False


def collect(now: datetime | None = None) -> DashboardStats:
    """Compute the dashboard's numbers."""
    now = now or timezone.now()
    finished = finished_counts(now)
    oldest = oldest_pending()
    total, is_estimate = table_total()
    consumers = consumer_states(now)
    against = basis(consumers)
    outdated = StudyQuestion.objects.outdated(against.versions).order_by().values("pk")
    needs_review, needs_review_flagged = review_queue.counts()
    running, completed = by_worker(now, [c.record.worker_id for c in consumers])
    limits = list(GateLimit.objects.all())
    lately = jobs().filter(completed_at__gte=now - RATE_WINDOW, status=JobStatus.COMPLETED)
    return DashboardStats(
        now=now,
        active=active_counts(),
        finished_24h=by_status_kind((s, kind, n) for (s, kind, _), n in finished.items()),
        oldest_pending_age=(now - oldest) if oldest else None,
        stale=jobs().stale(now - timedelta(minutes=conf.STALE_MINUTES)).count(),
        hours=hourly(now),
        top_errors=top_errors(finished, waiting_again()),
        total_estimate=total,
        total_is_estimate=is_estimate,
        consumers=consumers,
        pauses=list(QueuePause.objects.all()),
        outdated=outdated[:OUTDATED_CAP].count(),  # never a full count of a huge table
        outdated_basis=against,
        needs_review=needs_review,
        needs_review_flagged=needs_review_flagged,
        tokens=tokens(now),
        gate_limits=limits,
        endpoints=endpoint_rows(consumers, limits, now),
        completed_recently=lately.count(),
        rate=eta.Rate.of(now),
        late_sets=late_sets(now),
        running_by_worker=running,
        completed_by_worker=completed,
        notices=notice_failures(now),
        durations=durations(now),
    )
