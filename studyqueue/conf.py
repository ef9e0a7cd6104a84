"""The app's settings: one STUDYQUEUE dict, each key overridable by STUDYQUEUE_<NAME>.

Precedence: ``settings.STUDYQUEUE[name]`` > environment ``STUDYQUEUE_<NAME>`` > default.
Values are read lazily on every access so ``override_settings`` works in tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings

from studyqueue.exceptions import SettingsError


@dataclass(frozen=True)
class Setting:
    """One setting: its type, default, and whether its value must never be shown."""

    type: type
    default: Any
    help: str
    secret: bool = False


SETTINGS: dict[str, Setting] = {
    "BATCH_SIZE": Setting(int, 1, "jobs claimed per claim call"),
    "INTERVAL_SECONDS": Setting(float, 60.0, "seconds between consume cycles"),
    "CYCLE_BUDGET_SECONDS": Setting(float, 50.0, "a cycle keeps draining this long at most"),
    "STALE_MINUTES": Setting(
        float, 10.0, "a processing job with no heartbeat for this long is stale"
    ),
    "HEARTBEAT_SECONDS": Setting(float, 30.0, "how often a running job refreshes its heartbeat"),
    "MAX_ATTEMPTS": Setting(int, 3, "attempts before a job ends failed"),
    "BACKOFF_BASE_SECONDS": Setting(float, 30.0, "first retry delay; doubles per attempt"),
    "BACKOFF_MAX_SECONDS": Setting(float, 3600.0, "retry delay cap"),
    "BACKOFF_JITTER": Setting(float, 0.2, "random +/- fraction added to each retry delay"),
    "LLM_URL": Setting(str, "http://127.0.0.1:8080/v1", "OpenAI-compatible base URL"),
    "LLM_MODEL": Setting(str, "", "model id sent to the server (empty: the server's default)"),
    "LLM_API_KEY": Setting(str, "", "bearer token for the LLM server", secret=True),
    "LLM_TIMEOUT_SECONDS": Setting(float, 300.0, "whole-call timeout for one LLM request"),
    "LLM_STALL_SECONDS": Setting(
        float, 60.0, "a call that receives no byte for this long ends as llm_timeout"
    ),
    "LLM_MAX_REPLY_BYTES": Setting(
        int, 8 * 1024 * 1024, "a reply larger than this ends the call (llm_bad_response)"
    ),
    "LLM_CONNECT_TIMEOUT_SECONDS": Setting(float, 5.0, "connect timeout for the LLM server"),
    "LLM_MAX_TOKENS": Setting(int, 1024, "max_tokens sent with each request"),
    "LLM_TEMPERATURE": Setting(float, 0.2, "sampling temperature"),
    "GATE_PERMITS": Setting(int, 1, "concurrent LLM calls allowed per endpoint"),
    "GATE_TIMEOUT_SECONDS": Setting(float, 600.0, "how long a caller waits for the gate"),
    "BREAKER_BASE_SECONDS": Setting(
        float, 2.0, "first pause after the LLM server fails as a whole"
    ),
    "BREAKER_MAX_SECONDS": Setting(float, 60.0, "longest pause while the LLM server stays down"),
    "SHUTDOWN_GRACE_SECONDS": Setting(
        float, 30.0, "on SIGTERM, running jobs get this long before being released"
    ),
    "PRUNE_FINISHED_AFTER_DAYS": Setting(int, 0, "delete finished jobs older than this (0: keep)"),
    "EXECUTION_HISTORY_DAYS": Setting(int, 7, "keep scheduler execution rows this long"),
    "PROMPT_TEMPLATE": Setting(
        str, "studyqueue/explanation_prompt.txt", "template that renders the user prompt"
    ),
    "SYSTEM_PROMPT_TEMPLATE": Setting(
        str, "studyqueue/explanation_system.txt", "template that renders the system prompt"
    ),
    "METRICS_TOKEN": Setting(
        str, "", "bearer token for /studyqueue/metrics (empty: staff login only)", secret=True
    ),
    "QUALITY_MIN_CHARS": Setting(int, 40, "an explanation shorter than this is flagged"),
    "QUALITY_RETRY": Setting(
        str,
        "",
        "comma-separated flags that retry the job once instead of only flagging "
        "(truncated, too_short, wrong_script; truncated retries with doubled max_tokens)",
    ),
}


def _parse(name: str, spec: Setting, raw: Any, source: str) -> Any:
    if spec.type is bool and isinstance(raw, str):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    try:
        return spec.type(raw)
    except (TypeError, ValueError):
        shown = "<hidden>" if spec.secret else repr(raw)
        kind = {int: "an integer", float: "a number"}.get(spec.type, spec.type.__name__)
        raise SettingsError(f"{source} must be {kind}, got {shown}") from None


class StudyQueueSettings:
    """Attribute access to the STUDYQUEUE settings, e.g. ``conf.BATCH_SIZE``."""

    def __getattr__(self, name: str) -> Any:
        spec = SETTINGS.get(name)
        if spec is None:
            raise AttributeError(f"unknown studyqueue setting {name!r}")
        overrides = getattr(django_settings, "STUDYQUEUE", None) or {}
        if name in overrides:
            return _parse(name, spec, overrides[name], f"STUDYQUEUE[{name!r}]")
        env_name = f"STUDYQUEUE_{name}"
        raw = os.environ.get(env_name)
        if raw is not None and raw != "":
            return _parse(name, spec, raw, env_name)
        return spec.default

    def as_dict(self, *, reveal_secrets: bool = False) -> dict[str, Any]:
        """All settings with their effective values; secrets masked unless asked for."""
        out: dict[str, Any] = {}
        for name, spec in SETTINGS.items():
            value = getattr(self, name)
            out[name] = "<set>" if spec.secret and value and not reveal_secrets else value
        return out


conf = StudyQueueSettings()
