"""One redaction function for every text that leaves the LLM client: no secret escapes."""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote, urlsplit, urlunsplit

REDACTED = "[redacted]"
# user:password@ (or a bare token@) in any URL-looking text.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
# The pieces of a key between characters a header cannot carry: ``sk-a\r\nb`` -> ``sk-a``, ``b``.
_VISIBLE_RUNS = re.compile(r"[!-~]+")
MIN_SECRET = 4  # shorter strings would redact ordinary words; a real key or password is longer


def is_valid_api_key(key: str) -> bool:
    """Whether ``key`` may be sent as a bearer token: visible ASCII only (empty is no key). A
    key that fails it is never put in a header by any process."""
    return all(33 <= ord(char) < 127 for char in key)


def _every_form(found: Iterable[str]) -> list[str]:
    """Each of ``found`` as is and as Python, bytes, JSON and URL escapes write it; longest
    first, none shorter than ``MIN_SECRET``."""
    forms: set[str] = set()
    for secret in filter(None, found):
        forms |= {secret, quote(secret, safe=""), json.dumps(secret)[1:-1], repr(secret)[1:-1]}
        forms.add(repr(secret.encode("utf-8", "backslashreplace"))[2:-1])
        forms.add(secret.encode("unicode_escape").decode("ascii"))
    return sorted({s for s in forms if len(s) >= MIN_SECRET}, key=len, reverse=True)


def secrets_of(url: str, api_key: str) -> list[str]:
    """The strings to hide for a client of ``url`` with ``api_key``: the key and its pieces, the
    URL's user info and password, and the Basic credentials they make."""
    found = {api_key, api_key.strip(), *_VISIBLE_RUNS.findall(api_key)}
    try:
        parts = urlsplit(url)
        user, password = parts.username or "", parts.password or ""
    except ValueError:
        user = password = ""  # a URL that does not parse: the pattern below still hides user info
    for value in (user, password):
        found |= {value, unquote(value)}
    if user or password:
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        found.add(base64.b64encode(pair).decode("ascii"))  # an echoed Basic header
    return _every_form(found)


def path_secrets(url: str) -> list[str]:
    """The strings to hide of ``url``'s path and query, for a URL whose path is its credential
    (a Slack-style webhook): shown, it keeps its scheme and host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        # Not a URL: the whole of it after the scheme may be the token.
        return [url.partition("://")[2]] if len(url.partition("://")[2]) >= MIN_SECRET else []
    found = {parts.path.lstrip("/"), parts.query}
    return _every_form(found | {unquote(value) for value in found})


class RedactingFilter(logging.Filter):
    """A logger's filter that redacts ``secrets()`` (read at each record) from what it logs."""

    def __init__(self, secrets: Callable[[], Iterable[str]]) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = list(self._secrets())
        if secrets:
            message = record.getMessage()
            cleaned = redact(message, secrets)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret and every URL's user info replaced by ``[redacted]``."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return _USERINFO.sub(rf"\1{REDACTED}@", text)


def without_credentials(url: str) -> str:
    """``url`` without its user info (httpx logs the URL it is given: give it this one)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
