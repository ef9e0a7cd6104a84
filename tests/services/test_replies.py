"""Reading a reply's JSON: nesting deeper than any reply is refused before it is parsed, and
what merely has many brackets (or brackets inside its strings) is read as JSON."""

from __future__ import annotations

import json
import sys

import pytest

from studyqueue.models import ErrorCode
from studyqueue.services.replies import NESTING_MAX, LLMError, ReplyParser, json_or_none


def test_json_nested_far_too_deep_is_refused_without_reaching_the_recursion_limit():
    deep = b"[" * 100_000 + b"]" * 100_000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # json.loads would hit it at once: it is never called
    try:
        assert json_or_none(deep) is None
        with pytest.raises(LLMError) as caught:
            ReplyParser().feed_body(deep)
    finally:
        sys.setrecursionlimit(limit)
    assert caught.value.code == ErrorCode.LLM_BAD_RESPONSE
    assert f"nested deeper than {NESTING_MAX}" in caught.value.message


@pytest.mark.parametrize(
    "data",
    [
        [[i] for i in range(500)],  # many brackets, two deep
        {"text": "[" * 500 + "{" * 500, "quoted": '\\"[[[' * 100},  # brackets in strings
        json.loads("[" * NESTING_MAX + "]" * NESTING_MAX),  # as deep as allowed
    ],
    ids=["wide", "in-strings", "at-the-limit"],
)
def test_json_with_many_brackets_but_no_depth_is_read(data):
    for payload in (json.dumps(data), json.dumps(data).encode()):
        assert json_or_none(payload) == data


def test_one_level_past_the_limit_is_refused_and_broken_json_stays_bad_json():
    assert json_or_none("[" * (NESTING_MAX + 1) + "]" * (NESTING_MAX + 1)) is None
    assert json_or_none("[" * 100 + "]" * 99) is None  # unbalanced: json.loads says so
