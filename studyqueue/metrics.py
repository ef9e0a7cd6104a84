"""The queue as Prometheus metrics, computed per scrape with the dashboard's index-backed
queries (never a full count of a big table): active jobs through their partial indexes,
finished ones over the last 24 hours through the ``completed_at`` index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import (
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from studyqueue import presence, queue
from studyqueue.models import ACTIVE_STATUSES, JobKind, JobStatus, QueuePause, StudyQuestionJob

# LLM call durations (seconds): from short answers to minutes on a real GPU box.
LLM_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class QueueCollector(Collector):
    """Every studyqueue metric, read from the database at scrape time."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        jobs = StudyQuestionJob.objects.using(queue.database()).order_by()
        yield self._active(jobs)
        recent = jobs.filter(completed_at__gte=now - timedelta(hours=24))
        yield self._finished(recent)
        yield self._waiting(jobs)
        oldest = jobs.filter(status=JobStatus.PENDING).aggregate(t=Min("created_at"))["t"]
        age = GaugeMetricFamily(
            "studyqueue_oldest_pending_age_seconds", "Age of the oldest pending job (0: none)."
        )
        age.add_metric([], (now - oldest).total_seconds() if oldest else 0.0)
        yield age
        yield self._llm_durations(recent)
        yield self._tokens(recent)
        yield from self._consumers()
        paused = GaugeMetricFamily(
            "studyqueue_queue_paused", "1 for each paused kind (all: every kind).", labels=["kind"]
        )
        for kind in QueuePause.objects.using(queue.database()).values_list("kind", flat=True):
            paused.add_metric([kind or "all"], 1)
        yield paused

    def _active(self, jobs) -> Metric:  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily(
            "studyqueue_jobs", "Jobs pending or processing now.", labels=["status", "kind"]
        )
        counts = {
            (row["status"], row["kind"]): row["n"]
            for row in jobs.filter(status__in=ACTIVE_STATUSES)
            .values("status", "kind")
            .annotate(n=Count("id"))
        }
        for status in ACTIVE_STATUSES:
            for kind in JobKind.values:
                family.add_metric([status, kind], counts.get((status, kind), 0))
        return family

    def _finished(self, recent) -> Metric:  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily(
            "studyqueue_jobs_finished_24h",
            "Jobs that ended in the last 24 hours, by status, kind and error code.",
            labels=["status", "kind", "error_code"],
        )
        rows = recent.values("status", "kind", "error_code").annotate(n=Count("id"))
        for row in rows:
            family.add_metric([row["status"], row["kind"], row["error_code"] or "none"], row["n"])
        return family

    def _waiting(self, jobs) -> Metric:  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily(
            "studyqueue_jobs_waiting_again",
            "Pending jobs that were released or are to be retried, by their last error code.",
            labels=["error_code"],
        )
        rows = (
            jobs.filter(status=JobStatus.PENDING)
            .exclude(error_code="")
            .values("error_code")
            .annotate(n=Count("id"))
        )
        for row in rows:
            family.add_metric([row["error_code"]], row["n"])
        return family

    def _llm_durations(self, recent) -> Metric:  # type: ignore[no-untyped-def]
        completed = recent.filter(status=JobStatus.COMPLETED, llm_ms__isnull=False)
        counts = completed.aggregate(
            total=Count("id"),
            seconds=Sum("llm_ms"),
            **{f"le_{b}": Count("id", filter=Q(llm_ms__lte=b * 1000)) for b in LLM_BUCKETS},
        )
        family = GaugeHistogramMetricFamily(
            "studyqueue_llm_call_seconds",
            "LLM call time of the jobs completed in the last 24 hours.",
            buckets=[
                *((str(float(b)), counts[f"le_{b}"]) for b in LLM_BUCKETS),
                ("+Inf", counts["total"]),
            ],
            gsum_value=(counts["seconds"] or 0) / 1000,
        )
        return family

    def _tokens(self, recent) -> Metric:  # type: ignore[no-untyped-def]
        sums = recent.aggregate(
            prompt=Sum("llm_prompt_tokens"), completion=Sum("llm_completion_tokens")
        )
        family = GaugeMetricFamily(
            "studyqueue_llm_tokens_24h", "Tokens of the last 24 hours.", labels=["type"]
        )
        family.add_metric(["prompt"], sums["prompt"] or 0)
        family.add_metric(["completion"], sums["completion"] or 0)
        return family

    def _consumers(self) -> Iterator[Metric]:
        states = presence.consumer_states()
        alive = GaugeMetricFamily(
            "studyqueue_consumers", "Consumers seen in the last day, by state.", labels=["state"]
        )
        for state in ("live", "silent", "stopped"):
            alive.add_metric([state], sum(1 for s in states if s.state == state))
        yield alive
        breaker = GaugeMetricFamily(
            "studyqueue_consumer_breaker_open",
            "1 when a live consumer pauses calling the LLM server (its breaker is open).",
            labels=["worker"],
        )
        for s in states:
            if s.state == "live":
                breaker.add_metric([s.record.worker_id], 1 if s.record.breaker_open else 0)
        yield breaker


__all__ = ["QueueCollector"]
