"""A lean httpx transport for plain-HTTP LLM servers: HTTP/1.1 over asyncio streams.

Why not httpx's default (httpcore over anyio)? With a GPU server answering short calls
back to back, the client's own time between two calls is GPU idle time. Measured here
(``bench/drain_rate.py``), httpcore costs ~1 ms more per call than this module, and
opening each call's connection costs ~0.5 ms more; together ~3% of a 50 ms call.

What it does:

- one request per connection (mlx_lm.server speaks HTTP/1.0 and closes after each reply;
  we send ``Connection: close`` so HTTP/1.1 servers do the same);
- at most ``max_connections`` requests at once (``pool`` timeout while waiting);
- while a request runs, the connection for the next one is opened ahead (``spare``):
  the next call starts with a write instead of a TCP handshake. A spare that the server
  closed, or that sat idle longer than ``SPARE_MAX_IDLE_SECONDS``, is dropped; a spare that turns
  out dead when used (closed before any reply byte) is replaced by a fresh connection
  once, so a server that drops idle connections costs nothing but that reconnect.
- httpx's timeouts (connect/read/write/pool) and exception types, so callers see exactly
  what the default transport raises.

HTTPS and proxied URLs keep httpx's default transport (see ``LLMClient``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# A spare older than this is not trusted (servers with idle timeouts drop connections
# quietly); after a call that long, the reconnect it saves does not matter anyway.
SPARE_MAX_IDLE_SECONDS = 10.0
_READ_SIZE = 64 * 1024


def _timeout(request: httpx.Request, name: str) -> float | None:
    return (request.extensions.get("timeout") or {}).get(name)


class _Connection:
    """One TCP connection carrying one request/response exchange through h11."""

    def __init__(self, stream: Stream, *, reused: bool) -> None:
        self.reader, self.writer = stream
        self.reused = reused  # opened ahead (spare): may have been closed by the server
        self.h11 = h11.Connection(h11.CLIENT)

    async def send(self, request: httpx.Request, body: bytes) -> None:
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"connection"]
        headers.append((b"Connection", b"close"))
        data = self.h11.send(
            h11.Request(method=request.method, target=request.url.raw_path, headers=headers)
        )
        if body:
            data += self.h11.send(h11.Data(data=body))
        data += self.h11.send(h11.EndOfMessage())
        try:
            async with asyncio.timeout(_timeout(request, "write")):
                self.writer.write(data)
                await self.writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from None
        except OSError as exc:
            raise httpx.WriteError(str(exc) or repr(exc), request=request) from exc

    async def next_event(self, request: httpx.Request) -> Any:
        """The next h11 event, reading from the socket as needed (read timeout applies)."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            if event is not h11.NEED_DATA:
                return event
            try:
                async with asyncio.timeout(_timeout(request, "read")):
                    data = await self.reader.read(_READ_SIZE)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the reply", request=request) from None
            except OSError as exc:
                raise httpx.ReadError(str(exc) or repr(exc), request=request) from exc
            self.h11.receive_data(data)

    def close(self) -> None:
        self.writer.close()


class _ResponseStream(httpx.AsyncByteStream):
    """The body of one response; closing it closes the connection and frees the slot."""

    def __init__(
        self, conn: _Connection, request: httpx.Request, release: asyncio.Semaphore
    ) -> None:
        self._conn = conn
        self._request = request
        self._release: asyncio.Semaphore | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._conn.next_event(self._request)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return

    async def aclose(self) -> None:
        self._conn.close()
        if self._release is not None:
            self._release.release()
            self._release = None


class DirectHTTPTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 client transport for ``http://`` URLs; see the module docstring."""

    def __init__(self, *, max_connections: int = 4) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._spare: asyncio.Task[Stream] | None = None
        self._spare_key: tuple[str, int] | None = None
        self._spare_at = 0.0
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol("DirectHTTPTransport serves http:// only")
        key = (request.url.host, request.url.port or 80)
        body = await request.aread()
        try:
            async with asyncio.timeout(_timeout(request, "pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection slot", request=request) from None
        try:
            conn = await self._connection(key, request)
            while True:
                try:
                    await conn.send(request, body)
                    self._open_spare(key)
                    event = await conn.next_event(request)
                    while isinstance(event, h11.InformationalResponse):
                        event = await conn.next_event(request)
                    break
                except (httpx.WriteError, httpx.ReadError, httpx.RemoteProtocolError):
                    conn.close()
                    if not conn.reused:
                        raise
                    # A connection opened ahead that the server had closed: the request
                    # never reached it (no byte came back). Once more on a fresh one.
                    conn = _Connection(await self._open(key, request), reused=False)
        except BaseException:
            self._slots.release()
            raise
        assert isinstance(event, h11.Response)
        return httpx.Response(
            event.status_code,
            headers=event.headers.raw_items(),
            stream=_ResponseStream(conn, request, self._slots),
            extensions={
                "http_version": b"HTTP/" + event.http_version,
                "reason_phrase": event.reason,
            },
        )

    async def _connection(self, key: tuple[str, int], request: httpx.Request) -> _Connection:
        spare = self._take_spare(key)
        if spare is not None:
            return _Connection(spare, reused=True)
        return _Connection(await self._open(key, request), reused=False)

    async def _open(self, key: tuple[str, int], request: httpx.Request) -> Stream:
        try:
            async with asyncio.timeout(_timeout(request, "connect")):
                return await asyncio.open_connection(*key)
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {key[0]}:{key[1]}", request=request
            ) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or repr(exc), request=request) from exc

    def _take_spare(self, key: tuple[str, int]) -> Stream | None:
        task, self._spare = self._spare, None
        if task is None:
            return None
        if not task.done():
            task.cancel()  # still connecting: a fresh connect is no slower
            return None
        if task.cancelled() or task.exception() is not None:
            return None
        reader, writer = task.result()
        fresh = time.monotonic() - self._spare_at < SPARE_MAX_IDLE_SECONDS
        if key != self._spare_key or not fresh or reader.at_eof() or writer.is_closing():
            writer.close()
            return None
        return reader, writer

    def _open_spare(self, key: tuple[str, int]) -> None:
        if self._closed or self._spare is not None:
            return
        task = asyncio.ensure_future(asyncio.open_connection(*key))
        # A server that is down fails the spare: the next call connects (and reports) itself.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._spare, self._spare_key, self._spare_at = task, key, time.monotonic()

    async def aclose(self) -> None:
        self._closed = True
        task, self._spare = self._spare, None
        if task is None:
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        elif not task.cancelled() and task.exception() is None:
            task.result()[1].close()
