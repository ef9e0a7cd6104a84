"""Endpoints for orchestrators and monitoring (health, readiness, Prometheus metrics) and
for learning apps (the sessions API); the last two take bearer tokens."""

from __future__ import annotations

import base64
import contextlib
import hmac
import json
import logging
from collections.abc import Callable, Iterable
from functools import wraps

from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from studyqueue.conf import conf
from studyqueue.models import StudySession
from studyqueue.monitoring.health import READY_WAIT_SECONDS, Check, liveness, run_checks
from studyqueue.monitoring.metrics import QueueCollector
from studyqueue.sessions import figures, recording, summaries, xapi

logger = logging.getLogger("studyqueue.api")
MAX_BODY = 1024 * 1024  # bytes of one session posted to the API
View = Callable[..., HttpResponse]


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


def _bearer(request: HttpRequest, tokens: Iterable[str]) -> bool:
    """Whether the request carries one of ``tokens`` (compared in constant time) after the
    scheme ``Bearer``, in any case, and a run of spaces (RFC 7235), or as the password of
    HTTP Basic (which xAPI clients send)."""
    scheme, _sp, given = request.headers.get("Authorization", "").partition(" ")
    sent = given.lstrip(" ").encode() if scheme.lower() == "bearer" else b""
    if scheme.lower() == "basic":
        with contextlib.suppress(ValueError):  # not base64, or not UTF-8
            sent = (
                base64.b64decode(given.strip(), validate=True).decode().partition(":")[2].encode()
            )
    return any(hmac.compare_digest(sent, t.encode()) for t in tokens if t)


def api_tokens() -> list[str]:
    """The sessions API's bearer tokens (API_TOKENS, comma-separated); none: it is off."""
    return [t.strip() for t in conf.API_TOKENS.split(",") if t.strip()]


# What the API answers while it is off, and ``serve`` says at start-up.
API_OFF = gettext_lazy("Sessions API: off (set STUDYQUEUE_API_TOKENS and restart to turn it on).")


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The queue in the Prometheus text format: a bearer token (METRICS_TOKEN) or staff."""
    user = request.user  # an anonymous user is neither active nor staff
    if not (_bearer(request, [conf.METRICS_TOKEN]) or (user.is_active and user.is_staff)):
        response = HttpResponse("metrics need a bearer token or a staff login\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="studyqueue"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _json(data: dict[str, object], status: int = 200) -> JsonResponse:
    """The API's JSON, its text as it is (Korean unescaped): UTF-8, as its Content-Type says."""
    return JsonResponse(data, status=status, json_dumps_params={"ensure_ascii": False})


def _refused(status: int, outcome: str, *errors: str) -> JsonResponse:
    logger.info("api_request outcome=%s status=%s", outcome, status)
    return _json({"errors": list(errors)}, status=status)


def _api(method: str) -> Callable[[View], View]:
    """A sessions API view: off (a JSON 404 saying how to turn it on) while API_TOKENS is
    empty, else it needs one of them (401) and ``method`` (405). A token, not a cookie,
    authenticates it: no CSRF."""

    def decorate(view: View) -> View:
        @wraps(view)
        def guarded(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            tokens = api_tokens()
            if not tokens:
                return _refused(404, "off", str(API_OFF))
            if not _bearer(request, tokens):
                response = _refused(401, "unauthorized", _("a valid bearer token is needed"))
                response["WWW-Authenticate"] = 'Bearer realm="studyqueue", Basic realm="studyqueue"'
                return response
            if request.method != method:
                return HttpResponseNotAllowed([method])
            return view(request, *args, **kwargs)

        return csrf_exempt(never_cache(guarded))

    return decorate


def _body(request: HttpRequest) -> object:
    """The JSON value of the body, or the response refusing it (413, 400)."""
    # A chunked body has no length, and Django reads none of it: read it from the server's
    # stream where the server ends that stream with the body (gunicorn does). Either way no
    # more than the limit is read, whatever length is declared.
    unsized = request.META.get("wsgi.input_terminated") and not request.META.get("CONTENT_LENGTH")
    body = (request.META["wsgi.input"] if unsized else request).read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        return _refused(413, "too_large", _("the body is over %(max)s bytes") % {"max": MAX_BODY})
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _refused(400, "not_json", _("the body is not JSON"))


@_api("POST")
def api_xapi_statements(request: HttpRequest) -> HttpResponse:
    """Store a statement or a list of them (``xapi.receive``): 200 with their ids."""
    version = request.headers.get("X-Experience-API-Version", "")
    if not xapi.VERSION.fullmatch(version):
        return _refused(400, "no_version", _("X-Experience-API-Version must be 1.0.x or 2.0.x"))
    statements = _body(request)
    if isinstance(statements, HttpResponse):
        return statements
    try:
        ids, recorded = xapi.receive(
            statements if isinstance(statements, list) else [statements], timezone.now()
        )
    except recording.Invalid as exc:
        return _refused(400, "invalid", *exc.reasons)
    except recording.Conflict as exc:
        return _refused(409, "conflict", str(exc))
    logger.info("api_request statements=%s sessions=%s status=200", len(ids), recorded)
    response = JsonResponse(ids, safe=False)
    response["X-Experience-API-Version"] = "1.0.3"
    return response


@_api("POST")
def api_sessions(request: HttpRequest) -> HttpResponse:
    """Record the session the body holds and queue its summary: 201; the same again: 200."""
    record = _body(request)
    if isinstance(record, HttpResponse):
        return record
    try:
        checked = recording.check(record)
    except recording.Invalid as exc:
        return _refused(400, "invalid", *exc.reasons)
    try:
        # The session and its summary job together, or neither.
        with transaction.atomic(using=StudySession.objects.all().db):
            session, created = recording.record(checked)
            if created:
                summaries.queue_summaries([session])
    except recording.Conflict as exc:
        return _refused(409, "conflict", str(exc))
    status = 201 if created else 200
    logger.info(
        "api_request session=%s outcome=%s status=%s",
        session.pk,
        "created" if created else "known",
        status,
    )
    if session.external_id:
        url = reverse("studyqueue:api-summary", args=[session.external_id])
    else:  # a URL of its own: an external id of the same digits names another session
        url = reverse("studyqueue:api-summary-by-id", args=[session.pk])
    return _json({"id": session.pk, "session": session.external_id, "summary_url": url}, status)


@_api("GET")
def api_summary(request: HttpRequest, key: str = "", pk: int | None = None) -> HttpResponse:
    """A session and its summary (``summaries.as_json``) by external id, or by id."""
    found = StudySession.objects.filter(**({"pk": pk} if pk is not None else {"external_id": key}))
    session = summaries.with_state(found).first()
    if session is None:
        return _refused(404, "unknown", _("no session %(id)s") % {"id": key or pk})
    return _json(summaries.as_json(session))


@_api("GET")
def api_learner(request: HttpRequest, learner: str) -> HttpResponse:
    """A learner's sessions, per tag over all of them and what is due now (``figures.learner``)."""
    found = figures.learner(learner, timezone.now())
    if found is None:
        return _refused(404, "unknown", _("no learner %(id)s") % {"id": learner})
    return _json(found)
