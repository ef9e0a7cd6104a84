"""The one redaction function: keys, URL credentials, header safety."""

from __future__ import annotations

from studyqueue.services.redact import REDACTED, is_header_safe, redact, secrets_of


def test_the_key_as_given_and_stripped_is_redacted():
    secrets = secrets_of("http://127.0.0.1:8080/v1", "sk-abcdef123\r")
    text = "Illegal header value b'Bearer sk-abcdef123\\r' and again sk-abcdef123"
    assert (
        redact(text, secrets)
        == f"Illegal header value b'Bearer {REDACTED}\\r' and again {REDACTED}"
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
    assert is_header_safe("sk-ABC_123.xyz~")
    assert not is_header_safe("sk-abc\r")
    assert not is_header_safe("sk abc")
    assert not is_header_safe("sk-äbc")
