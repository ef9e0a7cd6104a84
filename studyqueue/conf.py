"""The app's settings: ``settings.STUDYQUEUE[name]``, else environment ``STUDYQUEUE_<NAME>``,
else the default; read on every access (``override_settings`` works). A number that is not
finite or out of its range is refused on access, so no code computes from an absurd value."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings

from studyqueue.exceptions import SettingsError


class SettingOutOfRange(SettingsError):
    """A numeric setting lies outside its allowed range."""


class SettingNotFinite(SettingsError):
    """A numeric setting is NaN or infinite."""


MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
AUTO = "auto"


@dataclass(frozen=True)
class Setting:
    """One setting; a number's range excludes ``low`` when ``above_low``."""

    type: type
    default: Any
    help: str
    secret: bool = False
    low: float | None = None
    high: float | None = None
    above_low: bool = False
    auto: bool = False  # the word ``auto`` is accepted besides a number (``AUTO``)

    def range_text(self) -> str:
        """The allowed range in words, e.g. ``greater than 0 and at most 86400``."""
        parts = []
        if self.low is not None:
            parts.append(f"{'greater than' if self.above_low else 'at least'} {_shown(self.low)}")
        if self.high is not None:
            parts.append(f"at most {_shown(self.high)}")
        return " and ".join(parts)


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _duration(default: float, help: str, high: float, *, zero: bool = False) -> Setting:
    """A duration in its setting's unit: over 0 (or at least 0 with ``zero``), at most ``high``."""
    return Setting(float, default, help, low=0.0, high=high, above_low=not zero)


SETTINGS: dict[str, Setting] = {
    "BATCH_SIZE": Setting(int, 1, "jobs claimed per claim call", low=1, high=1000),
    "INTERVAL_SECONDS": _duration(
        60.0,
        "seconds between consume cycles when nothing wakes the consumer sooner (an enqueue "
        "wakes it at once on PostgreSQL, within a second on SQLite)",
        DAY,
    ),
    "CYCLE_BUDGET_SECONDS": _duration(
        50.0, "a cycle keeps draining this long at most", DAY, zero=True
    ),
    "STALE_MINUTES": _duration(
        10.0, "a processing job with no heartbeat for this long is stale", 7 * DAY / MINUTE
    ),
    "HEARTBEAT_SECONDS": _duration(30.0, "how often a running job refreshes its heartbeat", HOUR),
    "MAX_ATTEMPTS": Setting(
        int,
        3,
        "attempts before a job ends failed (stored on each job when it is enqueued)",
        low=1,
        high=100,
    ),
    "BACKOFF_BASE_SECONDS": _duration(
        30.0, "first retry delay; doubles per attempt", DAY, zero=True
    ),
    "BACKOFF_MAX_SECONDS": _duration(3600.0, "retry delay cap", 7 * DAY, zero=True),
    "BACKOFF_JITTER": Setting(
        float, 0.2, "random +/- fraction added to each retry delay", low=0.0, high=1.0
    ),
    "DIRECT_DATABASE_URL": Setting(
        str,
        "",
        "PostgreSQL behind a transaction pooler (PgBouncer): a URL that reaches the same "
        "database without it, for LISTEN's session; empty: consumers poll for work",
        secret=True,
    ),
    "LLM_URL": Setting(
        str,
        "http://127.0.0.1:8080/v1",
        "OpenAI-compatible base URL; several, separated by commas, make an endpoint pool (each "
        "server with its own gate and breaker; LLM_ENDPOINTS gives each its own model, key and "
        "gate)",
    ),
    "LLM_MODEL": Setting(str, "", "model id sent to the server (empty: the server's default)"),
    "LLM_API_KEY": Setting(
        str, "", "bearer token for the LLM server; never logged or shown", secret=True
    ),
    "LLM_TIMEOUT_SECONDS": _duration(
        300.0, "whole-call timeout for one LLM request; keep it below the stale threshold", DAY
    ),
    "LLM_STALL_SECONDS": _duration(
        60.0,
        "a call that receives no byte for this long ends as llm_timeout and frees the gate",
        DAY,
    ),
    "LLM_MAX_REPLY_BYTES": Setting(
        int,
        8 * 1024 * 1024,
        "a reply (stream, JSON body or error body) larger than this many bytes ends the "
        "call as llm_bad_response while it is read",
        low=1024,
        high=1024**3,
    ),
    "LLM_CONNECT_TIMEOUT_SECONDS": _duration(5.0, "connect timeout for the LLM server", 600.0),
    "LLM_MAX_TOKENS": Setting(
        int, 1024, "max_tokens sent with each request", low=1, high=1_000_000
    ),
    "LLM_TEMPERATURE": Setting(float, 0.2, "sampling temperature", low=0.0, high=2.0),
    "GATE_PERMITS": Setting(
        int,
        1,
        "concurrent LLM calls allowed per endpoint, or auto: the concurrency the server "
        "rewards with the most tokens/s, up to GATE_MAX_PERMITS",
        low=1,
        high=256,
        auto=True,
    ),
    "GATE_MAX_PERMITS": Setting(
        int, 8, "the most concurrent LLM calls GATE_PERMITS=auto tries", low=1, high=256
    ),
    "GATE_TIMEOUT_SECONDS": _duration(
        600.0, "how long a job waits for a gate slot before it is handed back", DAY
    ),
    "BREAKER_BASE_SECONDS": _duration(
        2.0, "first pause after the LLM server fails as a whole", HOUR
    ),
    "BREAKER_MAX_SECONDS": _duration(60.0, "longest pause while the LLM server stays down", DAY),
    "SHUTDOWN_GRACE_SECONDS": _duration(
        30.0, "on a stop signal, running jobs get this long before being released", HOUR, zero=True
    ),
    "PRUNE_FINISHED_AFTER_DAYS": Setting(
        int, 0, "delete finished jobs older than this (0: keep)", low=0, high=3650
    ),
    "EXECUTION_HISTORY_DAYS": Setting(
        int, 7, "keep scheduler execution rows this long", low=0, high=3650
    ),
    "PROMPT_TEMPLATE": Setting(
        str, "studyqueue/explanation_prompt.txt", "template that renders the user prompt"
    ),
    "SYSTEM_PROMPT_TEMPLATE": Setting(
        str, "studyqueue/explanation_system.txt", "template that renders the system prompt"
    ),
    "SUMMARY_PROMPT_TEMPLATE": Setting(
        str, "studyqueue/summary_prompt.txt", "template that renders a session summary's prompt"
    ),
    "API_TOKENS": Setting(
        str, "", "bearer tokens of the sessions API, comma-separated (empty: no API)", secret=True
    ),
    "SESSION_IDLE_MINUTES": Setting(
        int,
        30,
        "an xAPI registration with no completed or terminated statement is recorded as a "
        "session this many minutes after its last statement",
        low=1,
        high=10_080,
    ),
    "COHORT_MIN": Setting(
        int,
        20,
        "a question's difficulty in a session's figures needs this many learners' first answers",
        low=1,
        high=1_000_000,
    ),
    "METRICS_TOKEN": Setting(
        str, "", "bearer token for /studyqueue/metrics (empty: staff login only)", secret=True
    ),
    "QUALITY_MIN_CHARS": Setting(
        int,
        40,
        "an explanation shorter than this many characters is flagged too_short",
        low=0,
        high=100_000,
    ),
    "QUALITY_RETRY": Setting(
        str,
        "",
        "comma-separated quality flags that retry the job once instead of only flagging it "
        "(truncated, unfinished, too_short, wrong_script, answer_mismatch, no_answer_stated; "
        "truncated retries with doubled max_tokens)",
    ),
    "KEY_AUDIT": Setting(
        bool,
        True,
        "audit the key of a question with choices before its first explanation (and again "
        "when its text, choices or key change): the model is asked for the answer alone, "
        "never shown the key (key_audit jobs, queued first wherever an explanation is)",
    ),
    "KEY_AUDIT_SAMPLES": Setting(
        int,
        3,
        "how many times, at most, the key audit asks the model for the answer (each at most "
        "16 tokens, at KEY_AUDIT_TEMPERATURE; it stops once the rest could not change the "
        "verdict); a majority naming the key agrees, all naming the same other choice "
        "disputes it",
        low=1,
        high=9,
    ),
    "KEY_AUDIT_TEMPERATURE": Setting(
        float,
        0.7,
        "sampling temperature of the key audit's samples (above 0: the samples must be able "
        "to differ)",
        low=0.0,
        high=2.0,
        above_low=True,
    ),
    "KEY_AUDIT_HOLDS": Setting(
        bool,
        True,
        "a disputed key holds its question's explanation (no LLM call is spent on it) until a "
        "reviewer keeps or changes the key; off: the explanation is written anyway",
    ),
    "WEBHOOK_URL": Setting(
        str,
        "",
        "when a question set is done, a signed POST of its counts goes here (set.completed); "
        "empty: none (the Django signal and the owner's e-mail still go)",
    ),
    "WEBHOOK_TIMEOUT_SECONDS": _duration(
        30.0,
        "whole-delivery budget of one webhook POST (connect, send, every byte of the answer): "
        "a receiver still answering after it fails the attempt as webhook_failed",
        HOUR,
    ),
    "WEBHOOK_SECRET": Setting(
        str,
        "",
        "the key of the webhook's X-Studyqueue-Signature (sha256=<HMAC-SHA256 of the body>); "
        "never logged or shown",
        secret=True,
    ),
    "VERIFY": Setting(
        bool,
        True,
        "after each new explanation of a question with choices and a key, the blind verifier "
        "asks the model which choice the explanation supports, its answer line hidden and "
        "never shown the key (verification jobs, claimed only when no explanation or key "
        "audit job is ready)",
    ),
    "STEP_CHECK": Setting(
        bool,
        True,
        "after each new explanation of a question with choices and a key, the step check "
        "shows the model the key as its reference and the explanation one numbered sentence a "
        "line, and asks for the first wrong sentence (step_check jobs, claimed like "
        "verification jobs)",
    ),
}


def parse(spec: Setting, raw: Any, source: str) -> Any:
    """``raw`` as setting ``spec`` takes it (``source`` names it in errors)."""
    shown = "<hidden>" if spec.secret else repr(raw)
    if spec.auto and isinstance(raw, str) and raw.strip().lower() == AUTO:
        return AUTO
    if spec.type is str and not isinstance(raw, str):
        # str() accepts anything: an object in the settings dict would become a URL or a key.
        raise SettingsError(f"{source} must be text, got {shown}")
    if spec.type is bool:
        return _parse_bool(raw, source, shown)
    try:
        value = spec.type(raw)
    except (TypeError, ValueError, OverflowError):  # int(float("inf")) overflows
        kind = {int: "an integer", float: "a number"}.get(spec.type, spec.type.__name__)
        if spec.auto:
            kind += f" or {AUTO!r}"
        raise SettingsError(f"{source} must be {kind}, got {shown}") from None
    if spec.type in (int, float):
        if not math.isfinite(value):
            raise SettingNotFinite(f"{source} must be a finite number, got {value}")
        low, high = spec.low, spec.high
        below = low is not None and (value <= low if spec.above_low else value < low)
        if below or (high is not None and value > high):
            raise SettingOutOfRange(f"{source} must be {spec.range_text()}, got {_shown(value)}")
    return value


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _parse_bool(raw: Any, source: str, shown: str) -> bool:
    """A switch: True/False, or (from the environment) 1/0, true/false, yes/no, on/off."""
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower() if isinstance(raw, str) else None
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise SettingsError(f"{source} must be on or off (true/false, 1/0), got {shown}")


class StudyQueueSettings:
    """Attribute access to the STUDYQUEUE settings, e.g. ``conf.BATCH_SIZE``."""

    def __getattr__(self, name: str) -> Any:
        spec = SETTINGS.get(name)
        if spec is None:
            raise AttributeError(f"unknown studyqueue setting {name!r}")
        overrides = getattr(django_settings, "STUDYQUEUE", None) or {}
        if name in overrides:
            return parse(spec, overrides[name], f"STUDYQUEUE[{name!r}]")
        env_name = f"STUDYQUEUE_{name}"
        if raw := os.environ.get(env_name):  # unset or empty: the default
            return parse(spec, raw, env_name)
        return spec.default


conf = StudyQueueSettings()
