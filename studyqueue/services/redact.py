"""One redaction function for every text that leaves the LLM client: no secret escapes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

REDACTED = "[redacted]"
# user:password@ (or a bare token@) in any URL-looking text.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def secrets_of(url: str, api_key: str) -> list[str]:
    """The strings to hide for a client of ``url`` with ``api_key``: the key as given and
    stripped of surrounding white space, and the URL's password and user info."""
    found = [api_key, api_key.strip()]
    try:
        parts = urlsplit(url)
        found += [parts.password or "", parts.username or ""]
    except ValueError:
        pass  # a URL that does not parse: the pattern below still hides user info
    # Short strings would redact ordinary words; a real key or password is longer.
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret and every URL's user info replaced by ``[redacted]``."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return _USERINFO.sub(rf"\1{REDACTED}@", text)


def is_header_safe(value: str) -> bool:
    """Whether ``value`` can travel in an HTTP header as a token: visible ASCII only."""
    return all(33 <= ord(char) < 127 for char in value)
