"""Reading a reply's JSON (``replies.loads``): nesting deeper than any reply is refused before
it is parsed, in time linear in the payload; what merely has many brackets (or brackets inside
its strings) is read as JSON; a payload that is not UTF-8 is no JSON."""

from __future__ import annotations

import json
import sys

import pytest

from studyqueue.models import ErrorCode
from studyqueue.services.replies import NESTING_MAX, LLMError, ReplyParser, json_or_none, loads

DEEP = 100_000


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * DEEP + b"]" * DEEP,
        b"[" * DEEP,  # never closed
        b"[" * DEEP + b"}",  # closed by the wrong bracket
        '{"a": ' * DEEP + "1" + "}" * DEEP,
        b'["' + b"\\]" * 1000 + b'", ' + b"[" * DEEP + b"]" * DEEP + b"]",  # after a string
    ],
    ids=["balanced", "unclosed", "mismatched", "objects", "after-a-string"],
)
def test_json_nested_far_too_deep_is_refused_without_reaching_the_recursion_limit(payload):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # json.loads would hit it at once: it is never called
    try:
        assert json_or_none(payload) is None
        with pytest.raises(LLMError) as caught:
            ReplyParser().feed_body(payload if isinstance(payload, bytes) else payload.encode())
    finally:
        sys.setrecursionlimit(limit)
    assert caught.value.code == ErrorCode.LLM_BAD_RESPONSE
    assert caught.value.message == f"bad JSON: nested deeper than {NESTING_MAX}"


NESTED_64 = "[" * (NESTING_MAX - 1) + "[], " * 10 + "[]" + "]" * (NESTING_MAX - 1)  # 74 brackets


@pytest.mark.parametrize(
    "text",
    [
        json.dumps([[i] for i in range(500)]),  # many brackets, two deep
        json.dumps({"text": "[" * 500 + "{" * 500, "quoted": '\\"[[[' * 100}),  # in strings
        NESTED_64,  # as deep as allowed, past the bracket count
        json.dumps(["한국어 [" * 100, "\\", "\n"]),  # non-ASCII, escapes, brackets in strings
    ],
    ids=["wide", "in-strings", "at-the-limit", "unicode"],
)
def test_json_with_many_brackets_but_no_depth_is_read(text):
    for payload in (text, text.encode()):
        assert loads(payload) == json.loads(text)


def test_one_level_past_the_limit_is_refused():
    deeper = "[" + NESTED_64 + "]"
    with pytest.raises(ValueError, match=f"nested deeper than {NESTING_MAX}"):
        loads(deeper)


def test_a_long_string_left_open_is_scanned_once():
    """An open string full of escaped quotes after many brackets: each quote used to start a
    scan to the end (quadratic: 160 KB took minutes); the whole 8 MB reply a server may send
    is read at once now (timed out by the suite's 300 s limit otherwise)."""
    payload = b"[], " * NESTING_MAX + b'"' + b'\\"' * 4_000_000  # counted, then scanned
    with pytest.raises(ValueError, match="JSONDecodeError"):
        loads(payload)


def test_what_is_not_utf8_is_no_json():
    for payload in ('["a"]'.encode("utf-16"), b'{"content": "\xff\xfe"}'):
        with pytest.raises(ValueError, match="not UTF-8"):
            loads(payload)
        assert json_or_none(payload) is None
