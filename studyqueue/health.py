"""Health checks for orchestrators and operators: the database (reachable, migrated), the
consumers (one has run a cycle lately), the LLM server (reachable, serving a model).

The same checks back ``manage.py studyqueue_health`` and ``/studyqueue/healthz`` (liveness:
the database) and ``/studyqueue/readyz`` (readiness: all three). Details never carry a
secret: the LLM URL is redacted."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
from django.core.management import call_command
from django.db import DatabaseError, connections

from studyqueue import consumers, queue
from studyqueue.conf import conf
from studyqueue.services.redact import redact, secrets_of

CHECKS = ("db", "consumer", "llm")


@dataclass(frozen=True)
class Check:
    """One check's answer: ok, and a one-line reason."""

    name: str
    ok: bool
    detail: str


def check_db() -> Check:
    """The database answers and every migration is applied."""
    try:
        with connections[queue.database()].cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return Check("db", False, f"the database does not answer ({type(exc).__name__})")
    try:
        call_command("migrate", check_unapplied=True, verbosity=0, database=queue.database())
    except SystemExit:  # migrate --check's documented way to say "unapplied migrations"
        return Check("db", False, "migrations are not applied (run manage.py migrate)")
    return Check("db", True, "the database answers and is migrated")


def check_consumer() -> Check:
    """At least one consumer ran a cycle within two of its intervals."""
    try:
        live = [c for c in consumers.consumer_states() if c.state == "live"]
    except DatabaseError as exc:
        return Check("consumer", False, f"cannot read the consumers ({type(exc).__name__})")
    if not live:
        return Check("consumer", False, "no consumer has run a cycle within two intervals")
    names = ", ".join(c.record.worker_id for c in live[:5])
    return Check("consumer", True, f"{len(live)} consumer(s) live: {names}")


def check_llm() -> Check:
    """The LLM server answers ``GET /models`` with a JSON list (mlx_lm.server can answer 200
    with an empty body when misconfigured: the body is read, not only the status)."""
    url = f"{conf.LLM_URL.rstrip('/')}/models"
    secrets = secrets_of(conf.LLM_URL, conf.LLM_API_KEY)
    headers = {"Authorization": f"Bearer {conf.LLM_API_KEY}"} if conf.LLM_API_KEY else {}
    try:
        reply = httpx.get(url, headers=headers, timeout=conf.LLM_CONNECT_TIMEOUT_SECONDS)
        models = reply.json().get("data") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return Check("llm", False, redact(f"the LLM server is unreachable: {exc!r}", secrets))
    if not isinstance(models, list):
        detail = f"the LLM server answered HTTP {reply.status_code} without a model list"
        return Check("llm", False, detail)
    shown = redact(conf.LLM_URL, secrets)
    return Check("llm", True, f"the LLM server at {shown} serves {len(models)} model(s)")


def run_checks(names: tuple[str, ...] = CHECKS) -> list[Check]:
    """The named checks, in ``CHECKS`` order."""
    funcs = {"db": check_db, "consumer": check_consumer, "llm": check_llm}
    return [funcs[name]() for name in CHECKS if name in names]


def as_json(checks: list[Check]) -> str:
    return json.dumps(
        {
            "status": "ok" if all(c.ok for c in checks) else "fail",
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in checks},
        }
    )
