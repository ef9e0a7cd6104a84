"""An httpx client for an OpenAI-compatible ``/v1/chat/completions`` endpoint.

Built for mlx_lm.server (docs/howto/model-server.md): replies are streamed so that a timeout or a
shutdown closes the connection, which stops generation on the server; connections per
server are bounded; every failure maps to one ``ErrorCode``. What a server sends is
bounded too: no byte for ``stall_seconds`` ends the call, and a reply (or error body)
larger than ``max_reply_bytes`` ends it without being held in memory. Every message that
leaves the client is redacted: neither the API key nor URL credentials escape, and a key an
HTTP header cannot carry is never sent (``probe()`` and ``chat()`` say "LLM_API_KEY is
invalid" instead).

What a call returns (``LLMReply``), its errors (``LLMError``, classified by ``ErrorCode``)
and the parsing between them (``ReplyParser``) live here too: parsing is strict about shape
and lenient about size and content only within bounds, so whatever is accepted fits the
database columns on every backend (text without NUL bytes, a model name cut to its column,
token counts within 32 bits).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from django.utils.translation import gettext

from studyqueue.conf import conf
from studyqueue.models import ErrorCode, ExplanationRevision, FinishReason, fit, storable
from studyqueue.queue import retry
from studyqueue.services import endpoints
from studyqueue.services.endpoints import Endpoint
from studyqueue.services.redact import is_valid_api_key, redact, secrets_of, without_credentials

TOKENS_MAX = 2**31 - 1  # PositiveIntegerField on PostgreSQL
ERROR_TEXT_MAX = 300
RETRY_AFTER_MAX = 86400.0
# The shortest first-to-last-token span a decode rate is computed over. Chunks arrive with
# a millisecond or two of jitter (event loop wake-ups, TCP coalescing several tokens into
# one read, ms rounding); over 50 ms that is a few percent, over 2 ms it is the whole
# figure, which is how short replies used to record 6,500-18,000 tokens/s.
MIN_DECODE_SPAN_MS = 50


class LLMError(Exception):
    """A failed LLM call, classified by ``code`` and two facts, ``affects_all`` and
    ``reached_server``; what follows from them is ``studyqueue.queue.retry``'s to decide."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retry_after: float | None = None,
        affects_all: bool = False,
        reached_server: bool = True,
        call_started: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after
        # time.monotonic() when the failed call started (None: not a call's failure): the
        # breaker counts the failures of calls that were already running when it opened
        # as that one opening.
        self.call_started = call_started
        # True when every job would hit the same error (server down, unknown model,
        # wrong URL, bad key): the consumer pauses instead of failing jobs one by one.
        self.affects_all = affects_all or retry.is_server_wide(code)
        # False only when the request never reached the server (no connection, or it
        # could not be sent) or reached no endpoint (404: no model ran): such failures
        # cost the server nothing and are never counted against a job. Releases of calls
        # that reached it are bounded per job.
        self.reached_server = reached_server

    def with_message(self, message: str) -> LLMError:
        """The same error with another message (e.g. redacted)."""
        return LLMError(
            self.code,
            message,
            retry_after=self.retry_after,
            affects_all=self.affects_all,
            reached_server=self.reached_server,
            call_started=self.call_started,
        )


def bad_response(message: str) -> LLMError:
    return LLMError(ErrorCode.LLM_BAD_RESPONSE, message)


@dataclass(frozen=True)
class LLMReply:
    """A successful completion."""

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

    @property
    def truncated(self) -> bool:
        """The server stopped at max_tokens: the text may be cut mid-sentence."""
        return self.finish_reason == FinishReason.LENGTH

    @property
    def tokens_per_second(self) -> float | None:
        """The decode rate: ``decode_rate(completion_tokens, last - first token)``."""
        if self.first_token_ms is None or self.last_token_ms is None:
            return None
        return decode_rate(self.completion_tokens, self.last_token_ms - self.first_token_ms)


def decode_rate(completion_tokens: int | None, span_ms: float | None) -> float | None:
    """Tokens per second generated after the first one: ``(completion_tokens - 1)`` over
    the time from the first token to the last. None (not measurable) for fewer than two
    tokens or a span under ``MIN_DECODE_SPAN_MS`` (a whole-JSON reply has no span at all).
    The first token is excluded: it ends the prefill, whose time is ``first_token_ms``."""
    if completion_tokens is None or completion_tokens < 2 or span_ms is None:
        return None
    if span_ms < MIN_DECODE_SPAN_MS:
        return None
    return round((completion_tokens - 1) * 1000 / span_ms, 2)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when it
    gives no usable advice (absent, garbage, negative, not finite, a date not in the
    future), so that the caller falls back to its own backoff. At most a day: each
    caller caps it further by its own setting."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            return None
        return min(seconds, RETRY_AFTER_MAX)
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
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text[:ERROR_TEXT_MAX]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            err = err.get("message")
        if isinstance(err, str):
            return err[:ERROR_TEXT_MAX]
    return text[:ERROR_TEXT_MAX]


def classify_status(status: int, body: bytes, headers: httpx.Headers) -> LLMError:
    """The LLMError for a non-2xx reply."""
    detail = f"HTTP {status}: {error_text(body)}"
    if status in (429, 503):
        return LLMError(
            ErrorCode.LLM_OVERLOADED,
            detail,
            retry_after=parse_retry_after(headers.get("retry-after")),
        )
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


def _cached_tokens(usage: dict[str, Any], prompt_tokens: int | None) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` (OpenAI's and mlx_lm.server's place),
    clamped like the other counts and to ``prompt_tokens`` (a share above 1 is nonsense);
    None when the server does not say."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        return None
    cached = _tokens(details.get("cached_tokens"))
    if cached is None or prompt_tokens is None:
        return cached
    return min(cached, prompt_tokens)


def _json(payload: bytes | str) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise bad_response(f"bad JSON: {type(exc).__name__}") from None


class ReplyParser:
    """Collects a chat completion from stream lines or one whole JSON body."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_first_token: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock
        self._on_first_token = on_first_token
        self.started = clock()
        self.parts: list[str] = []
        self.finish_reason = ""
        self.model = ""
        self.usage: dict[str, Any] = {}
        self.done = False
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
            at = self._clock()
            if self.first_token_at is None:
                self.first_token_at = at
                if self._on_first_token is not None:
                    self._on_first_token()
            self.last_token_at = at
            self.parts.append(content)
        if choice.get("finish_reason"):
            self.finish_reason = fit(
                ExplanationRevision, "finish_reason", storable(str(choice["finish_reason"]))
            )

    def feed_line(self, raw: bytes) -> None:
        """One line of a server-sent event stream (UTF-8, as the SSE format defines)."""
        line = raw.decode("utf-8", "replace").strip()
        if self.done or not line or line.startswith(":"):  # separators, keep-alive comments
            return
        if not line.startswith("data:"):
            return  # event:/id:/retry: fields carry nothing we need
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
        now = self._clock()
        first, last = self.first_token_at, self.last_token_at
        prompt_tokens = _tokens(self.usage.get("prompt_tokens"))
        return LLMReply(
            content=content,
            model=self.model,
            finish_reason=self.finish_reason,  # "" when the server gave none: not a "stop"
            prompt_tokens=prompt_tokens,
            completion_tokens=_tokens(self.usage.get("completion_tokens")),
            elapsed_ms=int((now - self.started) * 1000),
            first_token_ms=None if first is None else int((first - self.started) * 1000),
            last_token_ms=None if last is None else int((last - self.started) * 1000),
            cached_tokens=_cached_tokens(self.usage, prompt_tokens),
        )


__all__ = ["LLMClient", "LLMError", "LLMReply", "Probe", "invalid_key_message", "probe_servers"]

logger = logging.getLogger("studyqueue.llm")

ERROR_BODY_MAX = 64 * 1024  # an error body is read this far, the rest ignored
# The health probe: a whole GET /models within this, and a model list is small.
PROBE_DEADLINE_SECONDS = 3.0
PROBE_MAX_BYTES = 1024 * 1024


def invalid_key_message() -> str:
    """What every call and probe says instead of sending a key a header cannot carry."""
    return gettext(
        "LLM_API_KEY is invalid: the configured LLM_API_KEY holds characters an HTTP header "
        "cannot carry (control, space or non-ASCII), so it is never sent; set it exactly as "
        "issued (manage.py check says the same)"
    )


def wrong_path_message(url: str) -> str:
    """What ``serve`` and ``manage.py check`` say of a server that answers 404 where the calls
    go (``url`` without credentials)."""
    values = {"url": url, "chat": chat_url(url)}
    suggestion = suggested_url(url)
    if suggestion:
        return gettext(
            "LLM server: %(url)s answers, but not at %(chat)s, where the calls go (HTTP 404): "
            "did you mean %(suggestion)s? Set STUDYQUEUE_LLM_URL; jobs wait until then."
        ) % {**values, "suggestion": suggestion}
    return (
        gettext(
            "LLM server: %(url)s answers, but not at %(chat)s, where the calls go (HTTP 404): "
            "check STUDYQUEUE_LLM_URL; jobs wait until then."
        )
        % values
    )


@dataclass(frozen=True)
class Probe:
    """What ``GET /models`` showed of a server; ``error`` is redacted."""

    status: int | None  # the HTTP status; None: no answer (refused, timed out, not sent)
    models: int | None  # how many models it lists; None: no model list
    detail: str = ""  # why there is no answer or no list, or what was unusual about it
    # The status of the path the calls use (``POST .../chat/completions``), asked only when
    # ``GET /models`` got 404; None: not asked or no answer. 404: the URL is wrong.
    chat_status: int | None = None

    @property
    def chat_path_missing(self) -> bool:
        """The server answers, but not on the path the calls use: every call gets 404."""
        return self.chat_status == 404


def chat_url(base_url: str) -> str:
    """Where the calls go for a server URL (credentials kept: redact before showing it)."""
    return f"{base_url.rstrip('/')}/chat/completions"


def suggested_url(base_url: str) -> str | None:
    """The URL a user probably meant when its chat path answers 404: the same with ``/v1``
    (what mlx_lm.server, vLLM, Ollama and llama.cpp serve under); None when it has one."""
    base = base_url.rstrip("/")
    return None if base.endswith("/v1") else f"{base}/v1"


def not_found_hint(base_url: str) -> str:
    """What to do about a 404 on the chat path, in a few words (untranslated: it is stored
    with the job and the breaker)."""
    suggestion = suggested_url(base_url)
    if suggestion:
        return f"did you mean {suggestion}?"
    return "check LLM_URL and LLM_MODEL"


class LLMClient:
    """An async chat-completions client; use ``async with LLMClient.from_settings() as c``.

    A consumer keeps one for its life, on its own event loop (an ``httpx.AsyncClient``
    must not outlive the loop it was made on). httpx's own transport: keep-alive where
    the server allows it (mlx_lm.server closes after each reply), at most
    ``max_connections`` at once, system proxy settings honoured.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str = "",
        api_key: str = "",
        timeout: float = 300.0,
        stall_seconds: float = 60.0,
        connect_timeout: float = 5.0,
        max_tokens: int = 1024,
        temperature: float = 0.2,
        max_connections: int = 4,
        max_reply_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.stall_seconds = min(stall_seconds, timeout)
        self.connect_timeout = connect_timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_reply_bytes = max_reply_bytes
        self._secrets = secrets_of(base_url, api_key)
        # httpx logs the URL it requests (INFO): it gets one without credentials, which
        # travel as Basic auth like httpx would send them from the URL.
        try:
            parts = urlsplit(self.base_url)
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
        except ValueError:  # a URL that does not parse: every call says so
            user = password = ""
        self._request_base = without_credentials(self.base_url)
        headers = {
            "Accept": "text/event-stream, application/json",
            # No compression: a reply is read raw, so its size bound is its real size.
            "Accept-Encoding": "identity",
        }
        # A key an HTTP header cannot carry (a pasted line end, a non-ASCII character) is
        # never handed to httpx: its errors and debug logs would show it. Every call then
        # fails as a configuration error instead (``manage.py check`` says so first).
        self._unsendable_key = not is_valid_api_key(api_key)
        if api_key and not self._unsendable_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # mlx_lm.server has a listen backlog of 5: more simultaneous connects than
        # calls allowed through the gate would only produce errors and stalls.
        self._http = httpx.AsyncClient(
            headers=headers,
            auth=httpx.BasicAuth(user, password) if user or password else None,
            timeout=httpx.Timeout(timeout, connect=connect_timeout, read=self.stall_seconds),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    @classmethod
    def from_settings(cls, endpoint: Endpoint | None = None) -> LLMClient:
        """A client of ``endpoint`` (default: the first the settings name), with the rest
        from the STUDYQUEUE settings."""
        if endpoint is None:
            endpoint = endpoints.first()
        return cls(
            base_url=endpoint.url,
            model=endpoint.model,
            api_key=endpoint.api_key,
            timeout=conf.LLM_TIMEOUT_SECONDS,
            stall_seconds=conf.LLM_STALL_SECONDS,
            connect_timeout=conf.LLM_CONNECT_TIMEOUT_SECONDS,
            max_tokens=conf.LLM_MAX_TOKENS,
            temperature=conf.LLM_TEMPERATURE,
            max_connections=endpoint.slots,
            max_reply_bytes=conf.LLM_MAX_REPLY_BYTES,
        )

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def url(self) -> str:
        return f"{self._request_base}/chat/completions"

    def redact(self, text: str) -> str:
        """``text`` without this client's secrets (API key, URL credentials)."""
        return redact(text, self._secrets)

    async def probe(self) -> Probe:
        """``GET /models`` within ``timeout`` (the whole request) and ``max_reply_bytes``; a
        nesting too deep to parse is no list. Never raises; the error is redacted.

        An empty 200 body counts as a list of no models: a plain mlx_lm.server sends one
        when it finds no Hugging Face cache to list, and it serves its model all the same.
        """
        if self._unsendable_key:
            return Probe(None, None, invalid_key_message())
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                probe = await self._probe()
        except TimeoutError:
            probe = Probe(None, None, f"no complete answer within {self.timeout:g}s")
        except Exception as exc:  # a probe reports, it never raises
            probe = Probe(None, None, f"{type(exc).__name__}: {exc}")
        chat_status = None
        if probe.status == 404:
            # It answers, but has no model list there: maybe the URL lacks its /v1. Only the
            # path the calls use can tell (mlx_lm.server serves /chat/completions too).
            chat_status = await self._chat_status(deadline)
        return Probe(probe.status, probe.models, self.redact(probe.detail)[:300], chat_status)

    async def _chat_status(self, deadline: float) -> int | None:
        """The status of an empty ``POST`` to the chat path: a server refuses the request
        without running a model (400, 422, or a dropped connection), or says 404 when the
        path is not there. None: no answer by ``deadline``."""
        try:
            async with asyncio.timeout_at(deadline):
                async with self._http.stream("POST", self.url, json={}) as response:
                    return response.status_code
        except (TimeoutError, httpx.HTTPError):
            return None

    async def server_page(self, path: str, *, limit: int = 256 * 1024) -> tuple[int, bytes] | None:
        """``GET path`` at the server's root (its URL without a final ``/v1``): the status
        and body, read within ``PROBE_DEADLINE_SECONDS`` and ``limit`` bytes; None when
        there is no answer, or a larger one. Never raises (what a server says of itself,
        ``services.server_limits``)."""
        if self._unsendable_key:
            return None
        root = self._request_base.removesuffix("/v1")
        try:
            async with asyncio.timeout(PROBE_DEADLINE_SECONDS):
                async with self._http.stream("GET", f"{root}{path}") as response:
                    body = bytearray()
                    async for chunk in response.aiter_raw():
                        body += chunk
                        if len(body) > limit:
                            return None
                    return response.status_code, bytes(body)
        except (TimeoutError, httpx.HTTPError):
            return None

    async def _probe(self) -> Probe:
        try:
            async with self._http.stream("GET", f"{self._request_base}/models") as response:
                status = response.status_code
                if status != 200:
                    return Probe(status, None, f"HTTP {status}")
                body = bytearray()
                async for chunk in response.aiter_raw():  # raw: a compressed body is no list
                    body += chunk
                    if len(body) > self.max_reply_bytes:  # not read further
                        return Probe(status, None, f"a body over {self.max_reply_bytes} bytes")
        except httpx.TimeoutException:
            return Probe(None, None, f"no complete answer within {self.timeout:g}s")
        except httpx.HTTPError as exc:
            return Probe(None, None, f"{type(exc).__name__}: {exc}")
        if not body.strip():
            return Probe(status, 0, "an empty body, as mlx_lm.server sends without a model cache")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return Probe(status, None, f"not JSON ({type(exc).__name__})")
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list):
            return Probe(status, None, "JSON without a model list")
        return Probe(status, len(models))

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int | None = None,
        on_sent: Callable[[], None] | None = None,
        on_first_token: Callable[[], None] | None = None,
        temperature: float | None = None,
    ) -> LLMReply:
        """One chat completion; raises ``LLMError`` (redacted) with the failure's code.

        ``on_sent`` is called once the request is written (the gate's hand-over waits for
        it); ``on_first_token`` once the first text arrives (the gate's warm-first waits
        for it). ``temperature`` replaces the client's own for this call (the key audit's
        samples)."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens or self.max_tokens,
            "temperature": self.temperature if temperature is None else temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        started = time.monotonic()  # the breaker groups the failures of calls running together
        if self._unsendable_key:
            raise LLMError(
                ErrorCode.LLM_REJECTED,
                invalid_key_message(),
                affects_all=True,
                reached_server=False,
                call_started=started,
            )
        try:
            async with asyncio.timeout(self.timeout):
                return (await self._post(body, on_sent, on_first_token)).reply()
        except TimeoutError:
            error = LLMError(ErrorCode.LLM_TIMEOUT, f"no complete reply within {self.timeout:g}s")
        except LLMError as exc:
            error = exc
        except Exception as exc:  # anything else is ours to classify, never to leak
            error = LLMError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        # Raised outside the handlers, so that no traceback chains back to a message
        # that still holds a secret.
        error.call_started = started
        raise error.with_message(self.redact(error.message))

    async def _post(
        self,
        body: dict[str, Any],
        on_sent: Callable[[], None] | None,
        on_first_token: Callable[[], None] | None,
    ) -> ReplyParser:
        # A refused or reset connect is retried once: mlx_lm.server's small listen
        # backlog drops connects under bursts even when it is healthy.
        for attempt in (1, 2):
            try:
                return await self._stream(body, on_sent, on_first_token)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == 2:
                    raise LLMError(
                        ErrorCode.LLM_UNAVAILABLE,
                        f"cannot connect to {self.base_url}: {exc!r}",
                        reached_server=False,
                    ) from None
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def _stream(
        self,
        body: dict[str, Any],
        on_sent: Callable[[], None] | None,
        on_first_token: Callable[[], None] | None,
    ) -> ReplyParser:
        parser = ReplyParser(on_first_token=on_first_token)
        received_any = False
        extensions = {"trace": _when_sent(on_sent)} if on_sent is not None else None
        try:
            async with self._http.stream(
                "POST", self.url, json=body, extensions=extensions
            ) as response:
                if response.status_code >= 400:
                    error_body = await self._read_error_body(response)
                    error = classify_status(response.status_code, error_body, response.headers)
                    if response.status_code == 404:
                        raise self._not_found(error)
                    raise error
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    # A server that ignores "stream": one whole JSON body.
                    parser.feed_body(b"".join([c async for c in self._raw(response)]))
                    return parser
                # Read to the end, past [DONE] (nothing more is fed), so that a keep-alive
                # connection goes back to the pool.
                async for line in self._lines(response):
                    received_any = True
                    parser.feed_line(line)
        except httpx.ReadTimeout:
            raise LLMError(
                ErrorCode.LLM_TIMEOUT, f"no byte from the server for {self.stall_seconds:g}s"
            ) from None
        except (httpx.LocalProtocolError, httpx.UnsupportedProtocol) as exc:
            # The request itself cannot be sent (e.g. a key with a control character):
            # a configuration error that every job would hit; nothing reached the server.
            raise LLMError(
                ErrorCode.LLM_REJECTED,
                f"the request could not be sent: {exc}",
                affects_all=True,
                reached_server=False,
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if parser.done:
                return parser  # the whole reply came; only the connection's end was rough
            if not received_any:
                raise LLMError(
                    ErrorCode.LLM_UNAVAILABLE, f"connection dropped before a reply: {exc!r}"
                ) from None
            raise await self._cut_off(repr(exc)) from None
        if not parser.done and not parser.finish_reason:
            # HTTP/1.0 servers end a body by closing: a close before [DONE] is a cut reply.
            raise await self._cut_off("closed before [DONE]")
        return parser

    def _not_found(self, error: LLMError) -> LLMError:
        """A 404 of the chat path: a wrong URL (no /v1) or an unknown model, the server's
        fault and every job's alike. No model ran, so like a refused connection it cost the
        server nothing: the job waits with its attempts kept while the breaker pauses."""
        return LLMError(
            ErrorCode.LLM_REJECTED,
            f"{error.message} at {self.url}; {not_found_hint(self._request_base)}",
            affects_all=True,
            reached_server=False,
        )

    async def _raw(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The body as sent, at most ``max_reply_bytes``; a larger one ends the call."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise bad_response(f"compressed reply ({encoding[:40]}) though none was accepted")
        total = 0
        async for chunk in response.aiter_raw():
            total += len(chunk)
            if total > self.max_reply_bytes:
                raise bad_response(
                    f"reply larger than LLM_MAX_REPLY_BYTES ({self.max_reply_bytes} bytes)"
                )
            yield chunk

    async def _lines(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The body's lines (without line ends); a line is held only until it ends."""
        buffer = bytearray()
        async for chunk in self._raw(response):
            scan_from = len(buffer)
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", scan_from)) != -1:
                yield bytes(buffer[start:end])
                start = scan_from = end + 1
            del buffer[:start]
        if buffer:
            yield bytes(buffer)

    async def _read_error_body(self, response: httpx.Response) -> bytes:
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk[: ERROR_BODY_MAX - len(body)]
            if len(body) >= ERROR_BODY_MAX:
                break  # the rest is not needed: closing the response drops it
        return bytes(body)

    async def _cut_off(self, detail: str) -> LLMError:
        """The error for a reply that stopped midway.

        A server that is still up dropped this call: count it against the job. A server
        that went away (stopped, restarted, crashed) is an outage: the job is released,
        and the worker bounds how often in a row that may happen to one job.
        """
        if await self._reachable():
            return LLMError(ErrorCode.LLM_SERVER_ERROR, f"reply cut off: {detail}")
        return LLMError(
            ErrorCode.LLM_UNAVAILABLE, f"reply cut off and the server is gone: {detail}"
        )

    async def _reachable(self) -> bool:
        """Whether the server accepts a TCP connection right now."""
        url = urlsplit(self.base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            async with asyncio.timeout(min(self.connect_timeout, 2.0)):
                _, writer = await asyncio.open_connection(url.hostname, port)
        except (OSError, TimeoutError, ValueError):
            return False
        writer.close()
        return True


def _when_sent(on_sent: Callable[[], None]) -> Callable[[str, Any], Awaitable[None]]:
    """An httpx ``trace`` extension (documented: "Request Extensions") that calls
    ``on_sent`` once the request body is written, on HTTP/1.1 or HTTP/2."""

    async def trace(event: str, info: Any) -> None:
        if event.endswith(".send_request_body.complete"):
            on_sent()

    return trace


async def _probe_one(url: str, api_key: str, deadline: float, connect_timeout: float) -> Probe:
    client = LLMClient(
        base_url=url,
        api_key=api_key,
        timeout=deadline,
        stall_seconds=deadline,
        connect_timeout=min(connect_timeout, deadline),
        max_connections=1,
        max_reply_bytes=PROBE_MAX_BYTES,
    )
    async with client:
        return await client.probe()


def probe_servers(
    targets: Sequence[tuple[str, str]],
    *,
    deadline: float = PROBE_DEADLINE_SECONDS,
    connect_timeout: float = PROBE_DEADLINE_SECONDS,
) -> list[Probe]:
    """``Probe`` each ``(url, api_key)`` at once, all within ``deadline`` seconds (blocking;
    call it where no event loop runs, as a view, a command or a thread does)."""

    async def run() -> list[Probe]:
        return list(
            await asyncio.gather(
                *(_probe_one(url, key, deadline, connect_timeout) for url, key in targets)
            )
        )

    return asyncio.run(run())
