"""The queue as Prometheus metrics, computed per scrape by ``studyqueue.monitoring.stats`` (the
dashboard's collector, so both show the same numbers from the same queries)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.utils import timezone
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from studyqueue.models import ACTIVE_STATUSES, JobKind, QueuePause
from studyqueue.monitoring import stats
from studyqueue.queue import presence

# LLM call durations (seconds): from short answers to minutes on a real GPU box.
LLM_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class QueueCollector(Collector):
    """Every studyqueue metric, read from the database at scrape time."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield self._active()
        yield self._finished(now)
        yield self._waiting()
        yield self._oldest(now)
        yield self._llm_durations(now)
        yield self._durations(now)
        yield from self._tokens(now)
        yield from self._consumers(now)
        yield self._paused()

    def _active(self) -> Metric:
        family = GaugeMetricFamily(
            "studyqueue_jobs", "Jobs pending or processing now.", labels=["status", "kind"]
        )
        counts = stats.active_counts()
        for status in ACTIVE_STATUSES:
            for kind in JobKind.values:
                family.add_metric([status, kind], counts.get(status, {}).get(kind, 0))
        return family

    def _finished(self, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "studyqueue_jobs_finished_24h",
            "Jobs that ended in the last 24 hours, by status, kind and error code.",
            labels=["status", "kind", "error_code"],
        )
        for (status, kind, code), n in stats.finished_counts(now).items():
            family.add_metric([status, kind, code or "none"], n)
        return family

    def _waiting(self) -> Metric:
        family = GaugeMetricFamily(
            "studyqueue_jobs_waiting_again",
            "Pending jobs that were released or are to be retried, by their last error code.",
            labels=["error_code"],
        )
        for code, n in stats.waiting_again().items():
            family.add_metric([code], n)
        return family

    def _oldest(self, now: datetime) -> Metric:
        oldest = stats.oldest_pending()
        family = GaugeMetricFamily(
            "studyqueue_oldest_pending_age_seconds", "Age of the oldest pending job (0: none)."
        )
        family.add_metric([], (now - oldest).total_seconds() if oldest else 0.0)
        return family

    def _durations(self, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "studyqueue_job_seconds",
            "Jobs that ended in the last hour: seconds waited once due (phase wait) and run"
            " (phase run), by kind, at the quantiles 0.5 and 0.95.",
            labels=["kind", "phase", "quantile"],
        )
        for kind, phases in stats.durations(now).items():
            for phase, (p50, p95) in phases.items():
                family.add_metric([kind, phase, "0.5"], p50)
                family.add_metric([kind, phase, "0.95"], p95)
        return family

    def _llm_durations(self, now: datetime) -> Metric:
        calls = stats.llm_calls(now, LLM_BUCKETS)
        return GaugeHistogramMetricFamily(
            "studyqueue_llm_call_seconds",
            "LLM call time of the jobs completed in the last 24 hours.",
            buckets=[
                *((str(float(b)), calls.at_most[b]) for b in LLM_BUCKETS),
                ("+Inf", calls.count),
            ],
            gsum_value=calls.total_ms / 1000,
        )

    def _tokens(self, now: datetime) -> Iterator[Metric]:
        totals = stats.tokens(now)
        family = GaugeMetricFamily(
            "studyqueue_llm_tokens_24h",
            "Tokens of the last 24 hours (cached: the prompt tokens served from the "
            "server's prompt cache, a part of prompt).",
            labels=["type"],
        )
        for kind in ("prompt", "completion", "cached"):
            family.add_metric([kind], getattr(totals, kind))
        yield family
        share = totals.cached_share
        yield GaugeMetricFamily(
            "studyqueue_llm_cached_share_24h",
            "Share of prompt tokens served from the server's prompt cache in the last 24 hours, "
            "over the replies that said (NaN: none did).",
            value=float("nan") if share is None else share,
        )
        family = GaugeMetricFamily(
            "studyqueue_llm_tokens_by_kind_24h",
            "Tokens of the jobs finished in the last 24 hours, by job kind: what explanations "
            "took beside what key audits and verification (checking) took.",
            labels=["kind", "type"],
        )
        for kind, (prompt, completion) in sorted(stats.tokens_by_kind(now).items()):
            family.add_metric([kind, "prompt"], prompt)
            family.add_metric([kind, "completion"], completion)
        yield family

    def _consumers(self, now: datetime) -> Iterator[Metric]:
        states = presence.consumer_states(now)
        alive = GaugeMetricFamily(
            "studyqueue_consumers", "Consumers seen in the last day, by state.", labels=["state"]
        )
        for state in presence.Liveness:
            alive.add_metric([state.value], sum(1 for s in states if s.state is state))
        yield alive
        breaker = GaugeMetricFamily(
            "studyqueue_consumer_breaker_open",
            "1 when a live consumer pauses calling the LLM server (its breaker is open).",
            labels=["worker"],
        )
        for s in states:
            if s.live:
                breaker.add_metric([s.record.worker_id], 1 if s.record.breaker_open else 0)
        yield breaker

    def _paused(self) -> Metric:
        family = GaugeMetricFamily(
            "studyqueue_queue_paused", "1 for each paused kind (all: every kind).", labels=["kind"]
        )
        for pause in QueuePause.objects.all():
            family.add_metric([pause.kind or "all"], 1)
        return family
