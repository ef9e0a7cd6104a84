"""The one redaction function: keys, URL credentials, header safety."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

from studyqueue.services.redact import (
    REDACTED,
    is_valid_api_key,
    redact,
    secrets_of,
    without_credentials,
)


def test_the_key_as_given_and_stripped_is_redacted():
    secrets = secrets_of("http://127.0.0.1:8080/v1", "sk-abcdef123\r")
    text = "Illegal header value b'Bearer sk-abcdef123\\r' and again sk-abcdef123"
    assert (
        redact(text, secrets) == f"Illegal header value b'Bearer {REDACTED}' and again {REDACTED}"
    )


def test_url_credentials_are_redacted_even_in_other_urls():
    secrets = secrets_of("http://llmuser:pa55word@gpu:8080/v1", "")
    assert redact("cannot connect to http://llmuser:pa55word@gpu:8080/v1", secrets) == (
        f"cannot connect to http://{REDACTED}@gpu:8080/v1"
    )
    assert redact("see https://a:b@elsewhere/x and pa55word alone") == (
        f"see https://{REDACTED}@elsewhere/x and pa55word alone"
    )
    assert "pa55word" not in redact("pa55word alone", secrets)


def test_short_values_and_an_unparsable_url_are_handled():
    assert secrets_of("http://[::1", "ab") == []  # too short to be a secret; no crash
    assert redact("nothing to hide") == "nothing to hide"


def test_header_safety():
    assert is_valid_api_key("sk-ABC_123.xyz~") and is_valid_api_key("")
    assert not is_valid_api_key("sk-abc\r")
    assert not is_valid_api_key("sk abc")
    assert not is_valid_api_key("sk-äbc")


def test_a_key_with_an_inner_line_end_is_redacted_in_every_escaped_form():
    key = "sk-abc123\r\nX-Evil: def456"
    secrets = secrets_of("http://127.0.0.1:8080/v1", key)
    texts = [
        key,
        repr(key),
        repr(f"Bearer {key}".encode()),  # h11: Illegal header value b'Bearer sk-...\r\n...'
        json.dumps({"error": key}),
        quote(key),
        key.encode("unicode_escape").decode(),
    ]
    for text in texts:
        shown = redact(f"LocalProtocolError({text})", secrets)
        for piece in ("sk-abc123", "X-Evil", "def456"):
            assert piece not in shown, (text, shown)


def test_a_non_ascii_key_is_redacted_as_text_and_as_bytes():
    key = "sk-äbc123456"
    secrets = secrets_of("http://h/v1", key)
    try:
        f"Bearer {key}".encode("ascii")
    except UnicodeEncodeError as exc:
        error = repr(exc)
    for text in (error, repr(key.encode()), str(key.encode())):
        assert "bc123456" not in redact(text, secrets), text


def test_url_credentials_are_redacted_decoded_and_as_a_basic_header():
    secrets = secrets_of("http://llmuser:pa%40ss-word@gpu/v1", "")
    basic = base64.b64encode(b"llmuser:pa@ss-word").decode()
    text = f"pa@ss-word pa%40ss-word Authorization: Basic {basic}"
    assert redact(text, secrets) == f"{REDACTED} {REDACTED} Authorization: Basic {REDACTED}"


def test_the_key_predicate_and_a_url_without_credentials():
    assert is_valid_api_key("") and is_valid_api_key("sk-ABC_123")
    assert not any(is_valid_api_key(k) for k in ("sk-a\r", "sk a", "sk-ä", "sk-\x00"))
    assert without_credentials("http://u:p@h:1/v1") == "http://h:1/v1"
    assert without_credentials("http://h:1/v1") == "http://h:1/v1"
    assert without_credentials("http://[::1") == "http://[::1"
