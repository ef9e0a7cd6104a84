"""An httpx client for an OpenAI-compatible ``/v1/chat/completions`` endpoint.

Built for mlx_lm.server (see the README): replies are streamed so that a timeout or a
shutdown closes the connection, which stops generation on the server; connections per
server are bounded; every failure maps to one ``ErrorCode``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from studyqueue.conf import conf
from studyqueue.models import ErrorCode

logger = logging.getLogger("studyqueue.llm")

# Codes that describe the server, not the job: the job waits without losing an attempt.
SERVER_WIDE = frozenset({ErrorCode.LLM_UNAVAILABLE, ErrorCode.LLM_OVERLOADED})


class LLMError(Exception):
    """A failed LLM call, classified by ``code``."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retry_after: float | None = None,
        affects_all: bool = False,
        reached_server: bool = True,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after
        # True when every job would hit the same error (server down, unknown model,
        # wrong URL, bad key): the consumer pauses instead of failing jobs one by one.
        self.affects_all = affects_all or code in SERVER_WIDE
        # False only when no connection could be made: the server is provably down, and
        # the call cost it nothing. Releases of calls that reached it are bounded per job.
        self.reached_server = reached_server


@dataclass(frozen=True)
class LLMReply:
    """A successful completion."""

    content: str
    model: str
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    elapsed_ms: int

    @property
    def truncated(self) -> bool:
        """The server stopped at max_tokens: the text may be cut mid-sentence."""
        return self.finish_reason == "length"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_text(body: bytes) -> str:
    """The server's error message: mlx's ``{"error": "..."}``, OpenAI's nested form, or text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            err = err.get("message")
        if isinstance(err, str):
            return err[:300]
    return text[:300]


def classify_status(status: int, body: bytes, headers: httpx.Headers) -> LLMError:
    """The LLMError for a non-2xx reply."""
    detail = f"HTTP {status}: {_error_text(body)}"
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


class _Accumulator:
    """Collects a chat completion from stream chunks or one whole JSON body."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.saw_content_field = False
        self.finish_reason = ""
        self.model = ""
        self.usage: dict[str, Any] = {}
        self.done = False

    def feed(self, data: Any, *, whole: bool) -> None:
        if not isinstance(data, dict):
            raise ValueError("reply is not a JSON object")
        if data.get("error"):
            raise ValueError(f"server reported an error: {_error_text(json.dumps(data).encode())}")
        self.model = str(data.get("model") or self.model)
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise ValueError("reply has no 'choices' list")
        if not choices:
            if whole:
                raise ValueError("reply has an empty 'choices' list")
            return  # the usage-only chunk of a stream
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ValueError("choice is not an object")
        part = choice.get("message" if whole else "delta")
        if not isinstance(part, dict):
            raise ValueError(f"choice has no '{'message' if whole else 'delta'}' object")
        if "content" in part:
            self.saw_content_field = True
            content = part["content"]
            if content is not None and not isinstance(content, str):
                raise ValueError("content is not a string")
            if content:
                self.parts.append(content)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def feed_sse_line(self, line: str) -> None:
        line = line.strip()
        if self.done or not line or line.startswith(":"):  # blank separators, keep-alive comments
            return
        if not line.startswith("data:"):
            return  # event:/id:/retry: fields carry nothing we need
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        self.feed(json.loads(payload), whole=False)

    def reply(self, elapsed_ms: int) -> LLMReply:
        content = "".join(self.parts).strip()
        if not content:
            raise LLMError(
                ErrorCode.LLM_EMPTY, "the model returned no text (content null or blank)"
            )

        def tokens(key: str) -> int | None:
            value = self.usage.get(key)
            return value if isinstance(value, int) and value >= 0 else None

        return LLMReply(
            content=content,
            model=self.model,
            finish_reason=self.finish_reason or "stop",
            prompt_tokens=tokens("prompt_tokens"),
            completion_tokens=tokens("completion_tokens"),
            elapsed_ms=elapsed_ms,
        )


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
        connect_timeout: float = 5.0,
        max_tokens: int = 1024,
        temperature: float = 0.2,
        max_connections: int = 4,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        headers = {"Accept": "text/event-stream, application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # mlx_lm.server has a listen backlog of 5: more simultaneous connects than
        # calls allowed through the gate would only produce errors and stalls.
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    @classmethod
    def from_settings(cls) -> LLMClient:
        """A client configured from the STUDYQUEUE settings."""
        return cls(
            base_url=conf.LLM_URL,
            model=conf.LLM_MODEL,
            api_key=conf.LLM_API_KEY,
            timeout=conf.LLM_TIMEOUT_SECONDS,
            connect_timeout=conf.LLM_CONNECT_TIMEOUT_SECONDS,
            max_tokens=conf.LLM_MAX_TOKENS,
            temperature=conf.LLM_TEMPERATURE,
            max_connections=max(conf.GATE_PERMITS, 1),
        )

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    async def chat(self, messages: list[dict[str, str]]) -> LLMReply:
        """One chat completion; raises ``LLMError`` with the failure's code."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                acc = await self._post(body)
        except TimeoutError:
            raise LLMError(
                ErrorCode.LLM_TIMEOUT, f"no complete reply within {self.timeout:g}s"
            ) from None
        return acc.reply(int((time.monotonic() - started) * 1000))

    async def _post(self, body: dict[str, Any]) -> _Accumulator:
        # A refused or reset connect is retried once: mlx_lm.server's small listen
        # backlog drops connects under bursts even when it is healthy.
        for attempt in (1, 2):
            try:
                return await self._stream(body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == 2:
                    raise LLMError(
                        ErrorCode.LLM_UNAVAILABLE,
                        f"cannot connect to {self.base_url}: {exc!r}",
                        reached_server=False,
                    ) from None
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def _stream(self, body: dict[str, Any]) -> _Accumulator:
        acc = _Accumulator()
        received_any = False
        try:
            async with self._http.stream("POST", self.url, json=body) as response:
                if response.status_code >= 400:
                    raise classify_status(
                        response.status_code, await response.aread(), response.headers
                    )
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    # A server that ignores "stream": one whole JSON body.
                    raw = await response.aread()
                    try:
                        acc.feed(json.loads(raw), whole=True)
                    except ValueError as exc:
                        raise LLMError(
                            ErrorCode.LLM_BAD_RESPONSE, f"bad JSON reply: {exc}"
                        ) from None
                    return acc
                # Read to the end, past [DONE] (nothing more is fed), so that a keep-alive
                # connection goes back to the pool.
                async for line in response.aiter_lines():
                    received_any = True
                    try:
                        acc.feed_sse_line(line)
                    except ValueError as exc:
                        raise LLMError(
                            ErrorCode.LLM_BAD_RESPONSE, f"bad stream chunk: {exc}"
                        ) from None
        except httpx.ReadTimeout:
            raise LLMError(ErrorCode.LLM_TIMEOUT, "the server stopped sending") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if acc.done:
                return acc  # the whole reply came; only the connection's end was rough
            if not received_any:
                raise LLMError(
                    ErrorCode.LLM_UNAVAILABLE, f"connection dropped before a reply: {exc!r}"
                ) from None
            raise await self._cut_off(repr(exc)) from None
        if not acc.done and not acc.finish_reason:
            # HTTP/1.0 servers end a body by closing: a close before [DONE] is a cut reply.
            raise await self._cut_off("closed before [DONE]")
        return acc

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
        url = httpx.URL(self.base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            async with asyncio.timeout(min(self.connect_timeout, 2.0)):
                _, writer = await asyncio.open_connection(url.host, port)
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True
