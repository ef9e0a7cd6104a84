"""What a call to an OpenAI-compatible server returns (``LLMReply``), its errors (``LLMError``)
and the parsing between them (``ReplyParser``): strict about shape, and whatever is accepted
fits the database columns on every backend."""

from __future__ import annotations

import contextlib
import email.utils
import itertools
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from studyqueue.models import ErrorCode, ExplanationRevision, FinishReason, fit, storable
from studyqueue.queue import retry

TOKENS_MAX = 2**31 - 1  # PositiveIntegerField on PostgreSQL
ERROR_TEXT_MAX = 300
RETRY_AFTER_MAX = 86400.0
# The shortest first-to-last-token span a decode rate is computed over. Chunks arrive with
# a millisecond or two of jitter (event loop wake-ups, TCP coalescing several tokens into
# one read, ms rounding): over 50 ms that is a few percent, over 2 ms the whole figure.
MIN_DECODE_SPAN_MS = 50


@dataclass(eq=False, repr=False)  # compared and shown as the exception it is
class LLMError(Exception):
    """A failed LLM call, classified by ``code``, ``affects_all`` and ``reached_server``; a copy
    with another message (e.g. redacted) is ``dataclasses.replace(error, message=...)``."""

    code: ErrorCode
    message: str
    _: KW_ONLY
    retry_after: float | None = None
    # Every job would hit the same error (server down, unknown model, wrong URL, bad key):
    # the consumer pauses instead of failing jobs one by one.
    affects_all: bool = False
    # False when the request never reached the server (no connection, or not sent) or
    # reached no endpoint (404: no model ran): it cost the server nothing and never counts
    # against a job. Releases of calls that reached it are bounded per job.
    reached_server: bool = True
    # time.monotonic() when the failed call started, for the breaker (None: not a call's).
    call_started: float | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)
        self.affects_all = self.affects_all or self.code in retry.SERVER_WIDE_ERRORS


def bad_response(message: str) -> LLMError:
    return LLMError(ErrorCode.LLM_BAD_RESPONSE, message)


@dataclass
class LLMReply:
    """A successful completion (the pool sets ``completion_tokens`` once the server's
    tokenizer counted them, after the call's gate slot is given back)."""

    content: str
    model: str
    finish_reason: str  # as the server said it ("stop", "length", ...); "" if it said none
    prompt_tokens: int | None
    completion_tokens: int | None
    elapsed_ms: int
    first_token_ms: int | None = None  # from sending the request to the first text
    last_token_ms: int | None = None  # from sending the request to the last text
    # Prompt tokens the server served from its prompt cache
    # (``usage.prompt_tokens_details.cached_tokens``); None when it does not say.
    cached_tokens: int | None = None
    endpoint: str = ""  # the server that wrote it (``endpoints.Endpoint.name``; set by the pool)
    # ``completion_tokens`` were counted by the client (``LLMClient.tokens_in``), the server
    # having reported none (llama-cpp-python's server streams no usage).
    tokens_counted: bool = False

    @property
    def truncated(self) -> bool:
        """The server stopped at max_tokens: the text may be cut mid-sentence."""
        return self.finish_reason == FinishReason.LENGTH

    @property
    def tokens_per_second(self) -> float | None:
        """The decode rate (``decode_rate``)."""
        if self.first_token_ms is None or self.last_token_ms is None:
            return None
        return decode_rate(self.completion_tokens, self.last_token_ms - self.first_token_ms)


def decode_rate(completion_tokens: int | None, span_ms: float | None) -> float | None:
    """Tokens per second after the first one (which ends the prefill), over the time from the
    first token to the last; None for fewer than two tokens or a span under
    ``MIN_DECODE_SPAN_MS``."""
    if completion_tokens is None or completion_tokens < 2:
        return None
    if span_ms is None or span_ms < MIN_DECODE_SPAN_MS:
        return None
    return round((completion_tokens - 1) * 1000 / span_ms, 2)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), at most a day; None
    when it gives no usable advice (the caller falls back to its own backoff)."""
    if not value:
        return None
    value = value.strip()
    with contextlib.suppress(ValueError):  # not a number: an HTTP date
        seconds = float(value)
        return min(seconds, RETRY_AFTER_MAX) if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - datetime.now(UTC)).total_seconds()
    return min(seconds, RETRY_AFTER_MAX) if seconds > 0 else None


def error_text(body: bytes) -> str:
    """The server's error message: mlx's ``{"error": "..."}``, OpenAI's nested form, or text."""
    text = body.decode("utf-8", "replace").strip()
    data = json_or_none(text)
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    return (err if isinstance(err, str) else text)[:ERROR_TEXT_MAX]


def classify_status(status: int, body: bytes, headers: httpx.Headers) -> LLMError:
    """The LLMError for a non-2xx reply."""
    detail = f"HTTP {status}: {error_text(body)}"
    if status in (429, 503):
        retry_after = parse_retry_after(headers.get("retry-after"))
        return LLMError(ErrorCode.LLM_OVERLOADED, detail, retry_after=retry_after)
    if status >= 500:
        return LLMError(ErrorCode.LLM_SERVER_ERROR, detail)
    # 401/403: bad key; 404: unknown model or wrong URL path; 405/411: not a chat endpoint.
    # None of these is the job's fault, and every other job would fail the same way.
    affects_all = status in (401, 403, 404, 405, 411)
    return LLMError(ErrorCode.LLM_REJECTED, detail, affects_all=affects_all)


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, TOKENS_MAX)


def token_count(body: bytes) -> int | None:
    """The count of a tokenizer's answer: ``{"count": n}`` (llama-cpp-python) or
    ``{"tokens": [...]}`` (llama.cpp); None for anything else."""
    data = json_or_none(body)
    if not isinstance(data, dict):
        return None
    tokens = data.get("tokens")
    return _tokens(len(tokens) if isinstance(tokens, list) else data.get("count"))


def _cached_tokens(usage: dict[str, Any], prompt_tokens: int | None) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``, at most ``prompt_tokens`` (None: unsaid)."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        return None
    cached = _tokens(details.get("cached_tokens"))
    return cached if cached is None or prompt_tokens is None else min(cached, prompt_tokens)


def json_or_none(payload: bytes | str) -> Any:
    """``payload`` parsed as JSON; None when it is not JSON (``loads``)."""
    try:
        return loads(payload)
    except ValueError:
        return None


def _json(payload: bytes | str) -> Any:
    try:
        return loads(payload)
    except ValueError as exc:
        raise bad_response(f"bad JSON: {exc}") from None


# A reply nests about five deep. Parsed, JSON nested 100,000 deep drives ``json.loads`` to
# the recursion limit, where a garbage collection runs other objects' finalizers, which then
# fail for want of stack: refused before it is parsed.
NESTING_MAX = 64
# A string, or one left open to the end; possessive, so that it never backtracks: linear.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def loads(payload: bytes | str) -> Any:
    """``payload`` (UTF-8, as JSON on the wire is) parsed as JSON; ``ValueError`` naming why
    not: not UTF-8, nested deeper than ``NESTING_MAX``, or what ``json.loads`` raised."""
    try:
        text = payload if isinstance(payload, str) else payload.decode()
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    # Counting comes first: it is cheap, and a reply's line has a handful of brackets.
    if text.count("[") + text.count("{") > NESTING_MAX:
        brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
        if max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0) > NESTING_MAX:
            raise ValueError(f"nested deeper than {NESTING_MAX}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(type(exc).__name__) from None


class ReplyParser:
    """Collects a chat completion from stream lines or one whole JSON body."""

    def __init__(self, *, on_first_token: Callable[[], None] | None = None) -> None:
        self._on_first_token = on_first_token
        self.started = time.monotonic()
        self.parts: list[str] = []
        self.finish_reason = ""
        self.model = ""
        self.usage: dict[str, Any] = {}
        self.done = False
        self.text_chunks = 0  # stream chunks that carried text: one token each, as servers send
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None

    def feed(self, data: Any, *, whole: bool) -> None:
        """One chunk (stream) or the whole reply, already decoded from JSON."""
        if not isinstance(data, dict):
            raise bad_response("reply is not a JSON object")
        if data.get("error"):
            raise bad_response(f"server reported an error: {error_text(json.dumps(data).encode())}")
        if data.get("model"):
            self.model = fit(ExplanationRevision, "model", storable(str(data["model"])))
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise bad_response("reply has no 'choices' list")
        if not choices:
            if whole:
                raise bad_response("reply has an empty 'choices' list")
            return  # the usage-only chunk of a stream
        choice = choices[0]
        if not isinstance(choice, dict):
            raise bad_response("choice is not an object")
        part = choice.get("message" if whole else "delta")
        if not isinstance(part, dict):
            raise bad_response(f"choice has no '{'message' if whole else 'delta'}' object")
        content = part.get("content")
        if content is not None and not isinstance(content, str):
            raise bad_response("content is not a string")
        if content:
            at = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = at
                if self._on_first_token is not None:
                    self._on_first_token()
            self.last_token_at = at
            self.parts.append(content)
            if not whole:
                self.text_chunks += 1
        if choice.get("finish_reason"):
            self.finish_reason = fit(
                ExplanationRevision, "finish_reason", storable(str(choice["finish_reason"]))
            )

    def feed_line(self, raw: bytes) -> None:
        """One line of a server-sent event stream (UTF-8, as the SSE format defines)."""
        line = raw.decode("utf-8", "replace").strip()
        # Separators, keep-alive comments and event:/id:/retry: fields carry nothing we need.
        if self.done or not line.startswith("data:"):
            return
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        self.feed(_json(payload), whole=False)

    def feed_body(self, body: bytes) -> None:
        """A whole JSON reply (a server that ignores ``"stream"``)."""
        self.feed(_json(body), whole=True)

    def reply(self) -> LLMReply:
        """The finished reply; ``LLMError`` (``llm_empty``) when it holds no text."""
        content = storable("".join(self.parts)).strip()
        if not content:
            raise LLMError(
                ErrorCode.LLM_EMPTY, "the model returned no text (content null or blank)"
            )
        now = time.monotonic()
        first, last = self.first_token_at, self.last_token_at
        prompt_tokens = _tokens(self.usage.get("prompt_tokens"))
        completion_tokens = _tokens(self.usage.get("completion_tokens"))
        # No usage: the stream's text chunks, never a zero (a whole body is not counted).
        counted = completion_tokens is None and self.text_chunks > 0
        return LLMReply(
            content=content,
            model=self.model,
            finish_reason=self.finish_reason,  # "" when the server gave none: not a "stop"
            prompt_tokens=prompt_tokens,
            completion_tokens=_tokens(self.text_chunks) if counted else completion_tokens,
            elapsed_ms=int((now - self.started) * 1000),
            first_token_ms=None if first is None else int((first - self.started) * 1000),
            last_token_ms=None if last is None else int((last - self.started) * 1000),
            cached_tokens=_cached_tokens(self.usage, prompt_tokens),
            tokens_counted=counted,
        )
