"""Endpoints for orchestrators and monitoring: health, readiness, Prometheus metrics."""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from studyqueue.conf import conf
from studyqueue.monitoring.health import READY_WAIT_SECONDS, Check, liveness, run_checks
from studyqueue.monitoring.metrics import QueueCollector


def _health(checks: list[Check]) -> JsonResponse:
    ok = all(c.ok for c in checks)
    details = {c.name: {"ok": c.ok, "detail": c.detail} for c in checks}
    return JsonResponse(
        {"status": "ok" if ok else "fail", "checks": details}, status=200 if ok else 503
    )


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the web process and its database (``SELECT 1``) answer. No login."""
    return _health(liveness())


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: the database, a live consumer and its LLM server (a bounded probe). No login."""
    return _health(run_checks(("db", "consumer", "llm"), llm_wait=READY_WAIT_SECONDS))


def _allowed(request: HttpRequest) -> bool:
    token = conf.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    user = request.user
    return bool(user.is_authenticated and user.is_active and user.is_staff)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The queue in the Prometheus text format: a bearer token (METRICS_TOKEN) or staff."""
    if not _allowed(request):
        response = HttpResponse("metrics need a bearer token or a staff login\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="studyqueue"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
