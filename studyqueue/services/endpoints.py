"""The LLM servers a consumer uses (its endpoint pool), as the settings name them: the URLs of
``LLM_URL`` (separated by commas), or ``LLM_ENDPOINTS``, one object per server, each key
defaulting to the setting of the same name (docs/howto/several-servers.md)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings as django_settings

from studyqueue.conf import AUTO, SETTINGS, conf, parse
from studyqueue.exceptions import SettingsError
from studyqueue.services.redact import redact, secrets_of

SETTING = "LLM_ENDPOINTS"
ENV = "STUDYQUEUE_LLM_ENDPOINTS"  # literal, so that a grep for it finds where it is read
# Hosts that name this machine: ``localhost`` and ``127.0.0.1`` reach the same server.
_LOOPBACK_NAMES = {"localhost": "127.0.0.1"}
_DEFAULT_PORTS = {"http": 80, "https": 443}
# The user info of a URL's authority (up to its last "@"): dropped before anything else, so
# that a URL whose credentials do not parse (or were redacted to ``[redacted]``) names the
# same gate as the URL without them, and no credential ever reaches a name.
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/?#]*@", re.IGNORECASE)


def endpoint_name(url: str) -> str:
    """The name of the gate (its leases, its ``GateLimit``) for a server at ``url``: one name
    per server however its URL is written, never with credentials, query or fragment."""
    url = _USERINFO.sub(r"\1", url.strip())
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return url.rstrip("/")
    if not host:
        return url.rstrip("/")
    scheme = parts.scheme.lower()
    host = _LOOPBACK_NAMES.get(host, host)  # ``hostname`` is already lower case
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), "", ""))


# An entry's keys and the setting each defaults to.
KEYS = {
    "url": "LLM_URL",
    "model": "LLM_MODEL",
    "api_key": "LLM_API_KEY",
    "gate_permits": "GATE_PERMITS",
    "gate_max_permits": "GATE_MAX_PERMITS",
}


@dataclass(frozen=True)
class Endpoint:
    """One LLM server and how it is used: ``permits`` is a number or ``"auto"``."""

    url: str
    model: str = ""
    api_key: str = ""
    permits: int | str = 1
    max_permits: int = 8

    @cached_property  # read by every report of a consumer: worked out once
    def shown_url(self) -> str:
        """The URL as written, its credentials replaced by ``[redacted]``."""
        return redact(self.url, secrets_of(self.url, self.api_key))

    @cached_property
    def name(self) -> str:
        """The server's name everywhere it is shown or shared (``endpoint_name``)."""
        return endpoint_name(self.shown_url)

    @property
    def auto(self) -> bool:
        """Its gate finds its own limit (``GATE_PERMITS=auto``)."""
        return self.permits == AUTO

    @property
    def slots(self) -> int:
        """The most calls its gate ever lets through."""
        return self.max_permits if self.auto else int(self.permits)


def _raw_entries() -> tuple[Any, str] | None:
    """The ``LLM_ENDPOINTS`` value and where it came from; None when it is not set."""
    overrides = getattr(django_settings, "STUDYQUEUE", None) or {}
    if SETTING in overrides and overrides[SETTING] not in (None, [], ""):
        return overrides[SETTING], f"STUDYQUEUE[{SETTING!r}]"
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw), ENV
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{ENV} must be a JSON list of objects: {exc.msg}") from None


def _entry(raw: Any, source: str) -> Endpoint:
    if not isinstance(raw, dict):
        raise SettingsError(f"{source} must be an object with a url, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise SettingsError(
            f"{source} has unknown keys {', '.join(unknown)} (known: {', '.join(KEYS)})"
        )
    if not isinstance(raw.get("url"), str) or not raw["url"].strip():
        raise SettingsError(f"{source} needs a url")
    url, model, api_key, permits, max_permits = (  # KEYS' order
        parse(SETTINGS[setting], raw[key], f"{source}[{key!r}]")
        if key in raw
        else getattr(conf, setting)
        for key, setting in KEYS.items()
    )
    return Endpoint(url.strip(), model, api_key, permits, max_permits)


def configured() -> list[Endpoint]:
    """The endpoints the settings name, in order (at least one); ``SettingsError`` for a
    malformed list or two entries naming one server (they would share one gate)."""
    found = _raw_entries()
    if found is None:
        urls = [url.strip() for url in str(conf.LLM_URL).split(",")]
        if not all(urls):
            raise SettingsError("STUDYQUEUE LLM_URL has an empty entry between its commas")
        entries = [{"url": url} for url in urls]
        source = "LLM_URL"
    else:
        entries, source = found
        if not isinstance(entries, list | tuple) or not entries:
            raise SettingsError(f"{source} must be a non-empty list of objects with a url")
    endpoints = [_entry(raw, f"{source}[{i}]") for i, raw in enumerate(entries)]
    names = [endpoint.name for endpoint in endpoints]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise SettingsError(f"{source} names one server twice: {', '.join(doubled)}")
    return endpoints


def first() -> Endpoint:
    """The endpoint a single call outside the queue uses."""
    return configured()[0]


def shown_urls() -> str:
    """Every endpoint's URL, credentials redacted, comma-separated (a consumer's ``llm_url``)."""
    return ",".join(endpoint.shown_url for endpoint in configured())
