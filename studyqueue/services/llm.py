"""An httpx client for an OpenAI-compatible ``/v1/chat/completions`` endpoint.

Built for mlx_lm.server (see the README): replies are streamed so that a timeout or a
shutdown closes the connection, which stops generation on the server; connections per
server are bounded; every failure maps to one ``ErrorCode``. What a server sends is
bounded too: no byte for ``stall_seconds`` ends the call, and a reply (or error body)
larger than ``max_reply_bytes`` ends it without being held in memory. Every message that
leaves the client is redacted: neither the API key nor URL credentials escape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from studyqueue.conf import conf
from studyqueue.models import ErrorCode
from studyqueue.services.llm_reply import (
    LLMError,
    LLMReply,
    ReplyParser,
    bad_response,
    classify_status,
)
from studyqueue.services.redact import is_header_safe, redact, secrets_of

__all__ = ["LLMClient", "LLMError", "LLMReply"]

logger = logging.getLogger("studyqueue.llm")

ERROR_BODY_MAX = 64 * 1024  # an error body is read this far, the rest ignored


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
        headers = {
            "Accept": "text/event-stream, application/json",
            # No compression: a reply is read raw, so its size bound is its real size.
            "Accept-Encoding": "identity",
        }
        # A key an HTTP header cannot carry (a pasted line end, a non-ASCII character) is
        # never handed to httpx: its errors and debug logs would show it. Every call then
        # fails as a configuration error instead (``manage.py check`` says so first).
        self._unsendable_key = bool(api_key) and not is_header_safe(api_key)
        if api_key and not self._unsendable_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # mlx_lm.server has a listen backlog of 5: more simultaneous connects than
        # calls allowed through the gate would only produce errors and stalls.
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout, read=self.stall_seconds),
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
            stall_seconds=conf.LLM_STALL_SECONDS,
            connect_timeout=conf.LLM_CONNECT_TIMEOUT_SECONDS,
            max_tokens=conf.LLM_MAX_TOKENS,
            temperature=conf.LLM_TEMPERATURE,
            max_connections=max(conf.GATE_PERMITS, 1),
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
        return f"{self.base_url}/chat/completions"

    def redact(self, text: str) -> str:
        """``text`` without this client's secrets (API key, URL credentials)."""
        return redact(text, self._secrets)

    async def chat(
        self, messages: list[dict[str, str]], *, max_tokens: int | None = None
    ) -> LLMReply:
        """One chat completion; raises ``LLMError`` (redacted) with the failure's code."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens or self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        if self._unsendable_key:
            raise LLMError(
                ErrorCode.LLM_REJECTED,
                "LLM_API_KEY holds characters an HTTP header cannot carry (control, space or "
                "non-ASCII); fix the setting (see manage.py check)",
                affects_all=True,
                reached_server=False,
            )
        try:
            async with asyncio.timeout(self.timeout):
                return (await self._post(body)).reply()
        except TimeoutError:
            error = LLMError(ErrorCode.LLM_TIMEOUT, f"no complete reply within {self.timeout:g}s")
        except LLMError as exc:
            error = exc
        except Exception as exc:  # anything else is ours to classify, never to leak
            error = LLMError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        # Raised outside the handlers, so that no traceback chains back to a message
        # that still holds a secret.
        raise error.with_message(self.redact(error.message))

    async def _post(self, body: dict[str, Any]) -> ReplyParser:
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

    async def _stream(self, body: dict[str, Any]) -> ReplyParser:
        parser = ReplyParser()
        received_any = False
        try:
            async with self._http.stream("POST", self.url, json=body) as response:
                if response.status_code >= 400:
                    error_body = await self._read_error_body(response)
                    raise classify_status(response.status_code, error_body, response.headers)
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
