"""System checks for STUDYQUEUE misconfiguration (ids studyqueue.E00x / W00x)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Warning, register

from studyqueue.conf import SETTINGS, conf
from studyqueue.exceptions import SettingsError


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list:
    """Every setting parses, numbers are in range, and timeouts nest sensibly."""
    problems: list = []
    values: dict[str, Any] = {}
    for name in SETTINGS:
        try:
            values[name] = getattr(conf, name)
        except SettingsError as exc:
            problems.append(Error(str(exc), id="studyqueue.E001"))
    if problems:
        return problems

    for name in ("BATCH_SIZE", "GATE_PERMITS", "MAX_ATTEMPTS", "LLM_MAX_TOKENS"):
        if values[name] < 1:
            problems.append(
                Error(
                    f"STUDYQUEUE {name} must be at least 1, got {values[name]}",
                    id="studyqueue.E002",
                )
            )
    for name in ("INTERVAL_SECONDS", "STALE_MINUTES", "HEARTBEAT_SECONDS", "LLM_TIMEOUT_SECONDS"):
        if values[name] <= 0:
            problems.append(
                Error(
                    f"STUDYQUEUE {name} must be positive, got {values[name]}", id="studyqueue.E002"
                )
            )
    if not str(values["LLM_URL"]).startswith(("http://", "https://")):
        problems.append(
            Error("STUDYQUEUE LLM_URL must start with http:// or https://", id="studyqueue.E003")
        )
    if problems:
        return problems

    stale_seconds = values["STALE_MINUTES"] * 60
    if values["LLM_TIMEOUT_SECONDS"] >= stale_seconds:
        problems.append(
            Warning(
                "LLM_TIMEOUT_SECONDS is not shorter than the stale threshold: a slow but live "
                "call may be reset and run twice.",
                hint="Lower STUDYQUEUE_LLM_TIMEOUT_SECONDS or raise STUDYQUEUE_STALE_MINUTES.",
                id="studyqueue.W001",
            )
        )
    if values["HEARTBEAT_SECONDS"] * 2 > stale_seconds:
        problems.append(
            Warning(
                "HEARTBEAT_SECONDS is more than half the stale threshold: one late heartbeat "
                "makes a live job look dead.",
                hint="Keep STUDYQUEUE_HEARTBEAT_SECONDS well under STUDYQUEUE_STALE_MINUTES.",
                id="studyqueue.W002",
            )
        )
    return problems
