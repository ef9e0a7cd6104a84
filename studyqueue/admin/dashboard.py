"""The queue dashboard: index-friendly numbers at a glance, drawn as CSS bars."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext

from studyqueue.admin.charts import hourly_charts, pct
from studyqueue.admin.common import PageAdmin, status_badge
from studyqueue.conf import AUTO, conf
from studyqueue.explanations import check_cost, flag_trust, prompt_versions
from studyqueue.models import ACTIVE_STATUSES, GateLimit, JobKind, JobStatus, QueueDashboard
from studyqueue.monitoring.stats import DashboardStats, collect
from studyqueue.queue.presence import ConsumerState
from studyqueue.times import short_duration

REFRESH_SECONDS = 5


def shown_kinds(stats: DashboardStats) -> list[JobKind]:
    """The status table's columns: explanations, and each other kind with a job in it (a
    column of zeros for a kind nobody uses only widens the page)."""
    used = {
        kind
        for rows in (stats.active, stats.finished_24h)
        for by_kind in rows.values()
        for kind, n in by_kind.items()
        if n
    }
    return [kind for kind in JobKind if kind == JobKind.EXPLANATION or kind in used]


def _chart_rows(stats: DashboardStats) -> dict[str, Any]:
    """The hourly charts, the error bars and the tables, ready for the template."""
    top_err = max((n for _, n in stats.top_errors), default=0)
    errors = [{"code": code, "count": n, "pct": pct(n, top_err)} for code, n in stats.top_errors]
    kinds = shown_kinds(stats)
    by_status = {**stats.finished_24h, **stats.active}
    table = [
        {
            "status": status,
            "badge": status_badge(status),
            "window": gettext("now") if status in ACTIVE_STATUSES else gettext("24 h"),
            "counts": [by_status.get(status, {}).get(kind, 0) for kind in kinds],
        }
        for status in JobStatus.values
    ]
    for phase, label in (("wait", gettext("waited once due")), ("run", gettext("ran"))):
        cells = [stats.durations.get(kind, {}).get(phase) for kind in kinds]
        table.append(
            {
                "status": phase,
                "badge": label,
                "window": gettext("1 h, median / 95 %"),
                "counts": [f"{c[0]:.1f} / {c[1]:.1f} s" if c else "-" for c in cells],
            }
        )
    return {
        "kinds": kinds,
        "charts": hourly_charts(stats),
        "error_rows": errors,
        "status_rows": table,
        "consumer_rows": [_consumer_row(stats, state) for state in stats.consumers],
        "gate_rows": [_gate_row(limit) for limit in stats.gate_limits],
    }


def _gate_row(limit: GateLimit) -> dict[str, Any]:
    """An endpoint's adaptive limit and the tokens/s measured at each limit."""
    return {
        "record": limit,
        "measured": [
            {"limit": n, "rate": f"{rate:.1f}", "current": n == limit.limit}
            for n, rate in limit.measured()
        ],
    }


def _consumer_row(stats: DashboardStats, state: ConsumerState) -> dict[str, Any]:
    """A consumer with its gate, and its jobs as the jobs table has them now."""
    shared = stats.shared_limit(state)
    worker = state.record.worker_id
    return {
        "c": state,
        "gate": state.record.gate_permits or "-",
        "limit": stats.gate_limit_of(state) if state.record.gate_permits == AUTO else None,
        "rate": dict(shared.measured()).get(shared.limit) if shared else None,
        "running": stats.running_by_worker.get(worker, 0),
        "completed": stats.completed_by_worker.get(worker, 0),
    }


def _version_rows() -> list[dict[str, Any]]:
    """Each prompt version's numbers, its checking's cost, and its decided flags' scores."""
    newest = prompt_versions.DASHBOARD_NEWEST
    trust = flag_trust.collect(newest)
    # About the jobs behind the newest explanations compared: each has an audit and a check.
    costs = check_cost.collect(newest_jobs=3 * newest)
    return [
        {
            "stats": v,
            "cost": check_cost.of(costs, v.prompt_version),
            "trust": [
                t for t in flag_trust.of(trust, v.prompt_version) if t.flagged_bad + t.flagged_good
            ],
        }
        for v in prompt_versions.collect(newest)
    ]


@admin.register(QueueDashboard)
class QueueDashboardAdmin(PageAdmin):
    """Staff with view permission on jobs see the dashboard; nothing here changes data."""

    permission = "studyqueue.view_studyquestionjob"

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name="studyqueue_queuedashboard_changelist"),
            path("data.json", view(self.data_view), name="studyqueue_queuedashboard_data"),
        ]

    def _context(self, request: HttpRequest) -> dict[str, Any]:
        if not self.has_view_permission(request):
            raise PermissionDenied
        stats = collect()
        done_in, oldest = stats.backlog_done_in, stats.oldest_pending_age
        return {
            **_chart_rows(stats),
            "stats": stats,
            "total": number_format(stats.total_estimate, force_grouping=True),
            "stale_minutes": f"{conf.STALE_MINUTES:g}",
            "pending_total": sum(stats.active.get(JobStatus.PENDING, {}).values()),
            "processing_total": sum(stats.active.get(JobStatus.PROCESSING, {}).values()),
            "oldest_pending": short_duration(oldest) if oldest is not None else None,
            "can_pause": request.user.has_perm("studyqueue.pause_queue"),
            "backlog_done_in": short_duration(done_in) if done_in is not None else None,
            "backlog_done_at": timezone.localtime(stats.now + done_in) if done_in else None,
        }

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        context = {
            **self._context(request),
            **self.page_context(request, gettext("Queue dashboard")),
            "refresh_failed": gettext("refresh failed"),
            "refresh_seconds": REFRESH_SECONDS,
            # Once per page load, not in the 5-second refresh: a GROUP BY over many rows.
            "prompt_versions": _version_rows(),
            "key_disputes": flag_trust.key_disputes(),
            "prompt_newest": number_format(prompt_versions.DASHBOARD_NEWEST, force_grouping=True),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/studyqueue/dashboard.html", context)

    def data_view(self, request: HttpRequest) -> JsonResponse:
        """The dashboard's numbers for the page to refresh itself (same permission)."""
        context = self._context(request)
        stats: DashboardStats = context["stats"]
        return JsonResponse(
            {
                "updated_at": timezone.localtime(stats.now).isoformat(),  # shown in local time
                "pending": context["pending_total"],
                "processing": context["processing_total"],
                "stale": stats.stale,
                "consumers_live": len(stats.live_consumers),
                "paused": [pause.kind or "all" for pause in stats.pauses],
                "llm_unreachable": stats.llm_unreachable_since is not None,
                "backlog_done_in_seconds": None
                if stats.backlog_done_in is None
                else round(stats.backlog_done_in.total_seconds()),
                "completed_per_hour": stats.completed_per_hour,
                "gate_limits": stats.live_gate_limits,
                "outdated": stats.outdated,
                # The versions "outdated" is counted against: the live consumers', else ours.
                "outdated_against": stats.outdated_basis.versions,
                "outdated_against_live": stats.outdated_basis.from_live,
                # The page's body as the server renders it (escaped by the template).
                "html": render_to_string("admin/studyqueue/dashboard_body.html", context, request),
            }
        )
