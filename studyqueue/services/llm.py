"""An httpx client for an OpenAI-compatible ``/v1/chat/completions`` endpoint, built for
mlx_lm.server (docs/howto/model-server.md). Replies are streamed, so that a timeout or a
shutdown closes the connection, which stops generation on the server; what a server sends is
bounded in time (``stall_seconds``) and size (``max_reply_bytes``). Every failure maps to one
``ErrorCode``; every message that leaves the client is redacted."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from django.utils.translation import gettext

from studyqueue.conf import conf
from studyqueue.models import ErrorCode
from studyqueue.services import endpoints
from studyqueue.services.endpoints import Endpoint
from studyqueue.services.redact import is_valid_api_key, redact, secrets_of, without_credentials
from studyqueue.services.replies import (
    LLMError,
    LLMReply,
    ReplyParser,
    bad_response,
    classify_status,
    loads,
    token_count,
)

__all__ = ["LLMClient", "LLMError", "LLMReply", "Probe", "invalid_key_message", "probe_servers"]

logger = logging.getLogger("studyqueue.llm")

ERROR_BODY_MAX = 64 * 1024  # an error body is read this far, the rest ignored
# The health probe: a whole GET /models within this, and a model list is small.
PROBE_DEADLINE_SECONDS = 3.0
PROBE_MAX_BYTES = 1024 * 1024
# Where a server that streams no usage counts a text's tokens: (path, the request's field
# for the text): llama-cpp-python's server, then llama.cpp's llama-server.
TOKENIZERS = (("/extras/tokenize/count", "input"), ("/tokenize", "content"))
# A tokenizer counts a reply in milliseconds (about 2 ms, measured); past this the reply keeps
# its chunk count, and the tokenizer is asked again next time (a busy server).
TOKENIZE_SECONDS = 1.0
KEEPALIVE_SECONDS = 2.0
# What a call is told once its request is written, and once its first text came (or None).
Hook = Callable[[], None] | None


def invalid_key_message() -> str:
    """What every call and probe says instead of sending a key a header cannot carry."""
    return gettext(
        "LLM_API_KEY is invalid: the configured LLM_API_KEY holds characters an HTTP header "
        "cannot carry (control, space or non-ASCII), so it is never sent; set it exactly as "
        "issued (manage.py check says the same)"
    )


def wrong_path_message(url: str) -> str:
    """What is said of a server that answers 404 where the calls go (``url``: no credentials)."""
    suggestion = suggested_url(url)
    if suggestion:
        message = gettext(
            "LLM server: %(url)s answers, but not at %(chat)s, where the calls go (HTTP 404): "
            "did you mean %(suggestion)s? Set STUDYQUEUE_LLM_URL; jobs wait until then."
        )
    else:
        message = gettext(
            "LLM server: %(url)s answers, but not at %(chat)s, where the calls go (HTTP 404): "
            "check STUDYQUEUE_LLM_URL; jobs wait until then."
        )
    chat = f"{url.rstrip('/')}/chat/completions"
    return message % {"url": url, "chat": chat, "suggestion": suggestion}


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


def suggested_url(base_url: str) -> str | None:
    """The URL with ``/v1`` (where mlx_lm.server, vLLM, Ollama and llama.cpp serve), or None;
    a URL pasted with its path (``…/v1/chat/completions``) is cut at its ``/v1``."""
    base = base_url.rstrip("/")
    head, v1, _ = base.partition("/v1/")
    return None if base.endswith("/v1") else f"{head}/v1" if v1 else f"{base}/v1"


class LLMClient:
    """An async chat-completions client (``async with LLMClient.from_settings() as c``); it must
    not outlive the event loop it was made on, as its ``httpx.AsyncClient`` must not."""

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
        # The tokenizers this server may have: the one that counted, once one has; none once
        # each answered with no count.
        self._tokenizers: tuple[tuple[str, str], ...] = TOKENIZERS
        if api_key and not self._unsendable_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # mlx_lm.server has a listen backlog of 5: more simultaneous connects than
        # calls allowed through the gate would only produce errors and stalls.
        self._http = httpx.AsyncClient(
            headers=headers,
            auth=httpx.BasicAuth(user, password) if user or password else None,
            timeout=httpx.Timeout(timeout, connect=connect_timeout, read=self.stall_seconds),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                # Idle connections are closed before servers close theirs (llama-server: 5 s,
                # httpx's default too): a request written as the server closes it may have
                # been read, so it is never sent again, and fails.
                keepalive_expiry=KEEPALIVE_SECONDS,
            ),
        )

    @classmethod
    def from_settings(cls, endpoint: Endpoint | None = None) -> LLMClient:
        """A client of ``endpoint`` (default: the first), the rest from the settings."""
        endpoint = endpoint or endpoints.first()
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
        """``GET /models`` within ``timeout`` and ``max_reply_bytes``; never raises (redacted)."""
        if self._unsendable_key:
            return Probe(None, None, invalid_key_message())
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                probe = await self._probe()
        except (TimeoutError, httpx.TimeoutException):
            probe = Probe(None, None, f"no complete answer within {self.timeout:g}s")
        except Exception as exc:  # a probe reports, it never raises
            probe = Probe(None, None, f"{type(exc).__name__}: {exc}")
        # A 404 answers, but has no model list there: maybe the URL lacks its /v1. Only the
        # path the calls use can tell (mlx_lm.server serves /chat/completions too).
        chat_status = await self._chat_status(deadline) if probe.status == 404 else None
        return Probe(probe.status, probe.models, self.redact(probe.detail)[:300], chat_status)

    async def _chat_status(self, deadline: float) -> int | None:
        """The status of an empty ``POST`` to the chat path (refused without running a model,
        or 404 when the path is not there); None: no answer by ``deadline``."""
        try:
            async with asyncio.timeout_at(deadline):
                async with self._http.stream("POST", self.url, json={}) as response:
                    return response.status_code
        except (TimeoutError, httpx.HTTPError):
            return None

    async def server_page(
        self, path: str, *, limit: int = 256 * 1024, post: dict[str, Any] | None = None
    ) -> tuple[int, bytes] | None:
        """``GET path`` at the server's root (its URL without ``/v1``; ``POST`` of ``post``
        as JSON): the status and body within ``PROBE_DEADLINE_SECONDS`` and ``limit`` bytes;
        None otherwise. Never raises."""
        if self._unsendable_key:
            return None
        root = self._request_base.removesuffix("/v1")
        method = "GET" if post is None else "POST"
        try:
            async with asyncio.timeout(PROBE_DEADLINE_SECONDS):
                async with self._http.stream(method, f"{root}{path}", json=post) as response:
                    body = await _body(response, limit)
                    return None if body is None else (response.status_code, body)
        except (TimeoutError, httpx.HTTPError):
            return None

    async def _probe(self) -> Probe:
        """``probe()``'s request; its errors are ``probe()``'s to report."""
        async with self._http.stream("GET", f"{self._request_base}/models") as response:
            status = response.status_code
            if status != 200:
                return Probe(status, None, f"HTTP {status}")
            body = await _body(response, self.max_reply_bytes)  # raw: compressed is no list
            if body is None:
                return Probe(status, None, f"a body over {self.max_reply_bytes} bytes")
        if not body.strip():  # mlx_lm.server without a model cache serves its model all the same
            return Probe(status, 0, "an empty body, as mlx_lm.server sends without a model cache")
        try:
            data = loads(body)
        except ValueError as exc:
            return Probe(status, None, f"not JSON ({exc})")
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list):
            return Probe(status, None, "JSON without a model list")
        return Probe(status, len(models))

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int | None = None,
        on_sent: Hook = None,
        on_first_token: Hook = None,
        temperature: float | None = None,
    ) -> LLMReply:
        """One chat completion; raises ``LLMError`` (redacted) with the failure's code.
        ``on_sent`` is called once the request is written, ``on_first_token`` once the first
        text arrives (the gate waits for each)."""
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
        try:
            if self._unsendable_key:
                raise _misconfigured(invalid_key_message())
            async with asyncio.timeout(self.timeout):
                reply = (await self._post(body, on_sent, on_first_token)).reply()
                if reply.tokens_counted and reply.truncated:
                    # No usage, stopped at max_tokens: it took exactly that many.
                    tokens = max(reply.completion_tokens or 0, body["max_tokens"])
                    return replace(reply, completion_tokens=tokens)
                return reply
        except TimeoutError:
            error = LLMError(ErrorCode.LLM_TIMEOUT, f"no complete reply within {self.timeout:g}s")
        except LLMError as exc:
            error = exc
        except Exception as exc:  # anything else is ours to classify, never to leak
            error = LLMError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        # Raised outside the handlers, so that no traceback chains back to a message
        # that still holds a secret.
        error.call_started = started
        raise replace(error, message=self.redact(error.message))

    async def tokens_in(self, reply: LLMReply) -> int | None:
        """The completion tokens of a ``reply`` whose stream reported none and which did not
        stop at ``max_tokens``, as the server's tokenizer counts its text, within
        ``TOKENIZE_SECONDS``: better than its text chunks, which miss the tokens of a
        character spanning several (Korean on a byte-level vocabulary: 21 chunks for 40
        tokens, measured). None: no tokenizer, or no count in time. Not the model's work:
        asked after the call's gate slot is given back (``pool.Held.count``)."""
        if not reply.tokens_counted or reply.truncated:
            return None
        try:
            async with asyncio.timeout(TOKENIZE_SECONDS):
                for path, field in self._tokenizers:
                    post = {field: reply.content}
                    page = await self.server_page(path, limit=PROBE_MAX_BYTES, post=post)
                    if page is None:
                        return None  # no answer in time (a busy server): asked again next time
                    count = token_count(page[1]) if page[0] == 200 else None
                    if count is not None:
                        self._tokenizers = ((path, field),)
                        # A chunk holds a token at least, a token a byte at least: a count
                        # outside is no count of this text.
                        low, high = reply.completion_tokens or 0, len(reply.content.encode())
                        return max(low, min(count, high))
        except TimeoutError:
            return None
        self._tokenizers = ()  # none here: the chunks from now on
        return None

    async def _post(self, body: dict[str, Any], on_sent: Hook, on_first_token: Hook) -> ReplyParser:
        # A refused or reset connect is retried once: mlx_lm.server's small listen
        # backlog drops connects under bursts even when it is healthy. So is a request
        # that a closed connection stopped before it was wholly written (llama.cpp's
        # llama-server closes kept-alive connections): the server cannot have taken it. One
        # written whole is never sent twice: the server may have read it and done the work.
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
            except LLMError as exc:
                # Not reached: the request was not wholly written (``_stream``).
                if attempt == 2 or exc.reached_server or exc.code != ErrorCode.LLM_UNAVAILABLE:
                    raise
        raise AssertionError("unreachable")

    async def _stream(
        self, body: dict[str, Any], on_sent: Hook, on_first_token: Hook
    ) -> ReplyParser:
        parser = ReplyParser(on_first_token=on_first_token)
        received_any = sent = False

        async def trace(event: str, info: Any) -> None:
            """httpx's ``trace`` extension: the request is written once its body is."""
            nonlocal sent
            if event.endswith(".send_request_body.complete"):
                sent = True
                if on_sent is not None:
                    on_sent()

        try:
            async with self._http.stream(
                "POST", self.url, json=body, extensions={"trace": trace}
            ) as response:
                if response.status_code >= 400:
                    error_body = await _body(response, ERROR_BODY_MAX, cut=True) or b""
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
            raise _misconfigured(f"the request could not be sent: {exc}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if parser.done:
                return parser  # the whole reply came; only the connection's end was rough
            if not received_any:
                raise LLMError(
                    ErrorCode.LLM_UNAVAILABLE,
                    f"connection dropped before a reply: {exc!r}",
                    reached_server=sent,  # else it was not wholly written: sent again
                ) from None
            raise await self._cut_off(repr(exc)) from None
        if not parser.done and not parser.finish_reason:
            # HTTP/1.0 servers end a body by closing: a close before [DONE] is a cut reply.
            raise await self._cut_off("closed before [DONE]")
        return parser

    def _not_found(self, error: LLMError) -> LLMError:
        """A 404 of the chat path (a wrong URL or an unknown model): every job's alike, and no
        model ran, so the job waits with its attempts kept while the breaker pauses. The hint
        is untranslated: it is stored with the job."""
        suggestion = suggested_url(self._request_base)
        hint = f"did you mean {suggestion}?" if suggestion else "check LLM_URL and LLM_MODEL"
        return _misconfigured(f"{error.message} at {self.url}; {hint}")

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

    async def _cut_off(self, detail: str) -> LLMError:
        """A reply that stopped midway: the job's error while the server is up, else an outage."""
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


def _misconfigured(message: str) -> LLMError:
    """A rejection every job would hit (the settings are wrong) that cost the server nothing."""
    return LLMError(ErrorCode.LLM_REJECTED, message, affects_all=True, reached_server=False)


async def _body(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes | None:
    """The raw body, or None once it is larger than ``limit`` bytes (``cut``: its first
    ``limit`` bytes); the rest is not read (closing the response drops it)."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]) if cut else None
    return bytes(body)


def probe_servers(
    targets: Sequence[tuple[str, str]],
    *,
    deadline: float = PROBE_DEADLINE_SECONDS,
    connect_timeout: float = PROBE_DEADLINE_SECONDS,
) -> list[Probe]:
    """``Probe`` each ``(url, api_key)`` at once within ``deadline`` seconds (no event loop)."""

    async def probe(url: str, api_key: str) -> Probe:
        async with LLMClient(
            base_url=url,
            api_key=api_key,
            timeout=deadline,
            stall_seconds=deadline,
            connect_timeout=min(connect_timeout, deadline),
            max_connections=1,
            max_reply_bytes=PROBE_MAX_BYTES,
        ) as client:
            return await client.probe()

    async def run() -> list[Probe]:
        return list(await asyncio.gather(*(probe(url, key) for url, key in targets)))

    return asyncio.run(run())
