"""A hostile chat-completions server for tests: raw asyncio, one mode per misbehaviour.

Each mode answers ``POST /v1/chat/completions`` in one deliberately bad way; a server
thread runs its own event loop (``HostileServer(mode).start()``). Big bodies are
generated lazily from one small buffer, so the server itself stays small in memory.

Modes: ``hangup`` (reads the request, closes without a byte), ``reset`` (closes with a TCP
RST), ``stall`` (sends headers and a keep-alive comment, then nothing), ``huge_stream``
(valid SSE chunks, 256 MB of them), ``endless_line`` (one SSE line that never ends),
``huge_json`` (a 256 MB JSON body), ``gzip_bomb`` (a small gzip body that inflates to
256 MB), ``echo_key`` (401 whose body repeats the Authorization header), ``deep_json``
(JSON nested 100,000 deep), ``bad_charset`` (a JSON body in a charset nobody knows),
``wide_values`` (a valid reply whose model name is 300 characters, with NUL bytes in the
text and token counts past 32 bits), ``huge_error`` (a 500 with a 256 MB body).

Modes aimed at the health probe's ``GET /v1/models`` (they answer any request the same way):
``deep_models`` (a model list nested 100,000 deep), ``drip_models`` (a valid model list sent
one byte every ``drip_seconds``, 2 s by default), ``huge_models`` (a 300 MB model list),
``empty_models`` (200 and an empty body, as a plain mlx_lm.server answers ``/v1/models`` when
it finds no Hugging Face cache: it sends its headers, fails to scan the cache, and closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
import struct
import threading
import zlib
from typing import Any

MB = 1024 * 1024
BIG = 256 * MB
CHUNK = 64 * 1024
MODES = (
    "hangup",
    "reset",
    "stall",
    "huge_stream",
    "endless_line",
    "huge_json",
    "gzip_bomb",
    "echo_key",
    "deep_json",
    "bad_charset",
    "wide_values",
    "huge_error",
    "deep_models",
    "drip_models",
    "huge_models",
    "empty_models",
)
MODELS = b'{"object": "list", "data": [{"id": "test-model", "object": "model"}]}'


@functools.cache
def gzip_bomb() -> bytes:
    """A JSON reply that gzip packs into ~250 KB and that inflates to 256 MB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    parts = [packer.compress(b'{"choices": [{"message": {"content": "')]
    block = b"a" * CHUNK
    parts += [packer.compress(block) for _ in range(BIG // CHUNK)]
    parts.append(packer.flush())
    return b"".join(parts)


def _event(data: Any) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def _delta(text: str, finish: str | None = None) -> bytes:
    return _event({"choices": [{"delta": {"content": text}, "finish_reason": finish}]})


class HostileServer:
    """One misbehaving server on 127.0.0.1; ``requests`` counts the chat requests seen."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.requests = 0
        self.bytes_sent = 0
        self.last_authorization = ""
        self.drip_seconds = 2.0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> HostileServer:
        if self.mode == "gzip_bomb":
            # Packed here, not in the first request: packing 256 MB costs seconds of CPU on a
            # loaded machine, inside the client's deadline and holding its thread's GIL.
            gzip_bomb()
        self._thread.start()
        self._ready.wait(5)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip()
            await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests += 1
            self.last_authorization = headers.get("authorization", "")
            await getattr(self, f"_{self.mode}")(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up, as it should
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.bytes_sent += len(data)
        await writer.drain()

    async def _head(self, writer: asyncio.StreamWriter, status: str, *headers: str) -> None:
        lines = [f"HTTP/1.0 {status}", *headers, "", ""]
        await self._send(writer, "\r\n".join(lines).encode())

    async def _repeat(self, writer: asyncio.StreamWriter, piece: bytes, total: int) -> None:
        block = piece * max(1, CHUNK // len(piece))
        sent = 0
        while sent < total:
            await self._send(writer, block)
            sent += len(block)

    # ------------------------------------------------------------------ modes

    async def _hangup(self, writer: asyncio.StreamWriter) -> None:
        pass  # close without a byte

    async def _reset(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    async def _stall(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: text/event-stream")
        await self._send(writer, b": keepalive 1/2\n\n")
        await asyncio.sleep(3600)  # like mlx_lm.server hung after prompt processing

    async def _huge_stream(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: text/event-stream")
        await self._repeat(writer, _delta("word "), BIG)

    async def _endless_line(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: text/event-stream")
        await self._send(writer, b'data: {"choices": [{"delta": {"content": "')
        await self._repeat(writer, b"a", BIG)

    async def _huge_json(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: application/json")
        await self._send(writer, b'{"choices": [{"message": {"content": "')
        await self._repeat(writer, b"a", BIG)
        await self._send(writer, b'"}, "finish_reason": "stop"}]}')

    async def _gzip_bomb(self, writer: asyncio.StreamWriter) -> None:
        body = gzip_bomb()
        await self._head(
            writer,
            "200 OK",
            "Content-Type: application/json",
            "Content-Encoding: gzip",
            f"Content-Length: {len(body)}",
        )
        await self._send(writer, body)

    async def _echo_key(self, writer: asyncio.StreamWriter) -> None:
        key = self.last_authorization.removeprefix("Bearer ")
        body = json.dumps({"error": f"Incorrect API key provided: {key}"}).encode()
        await self._head(
            writer, "401 Unauthorized", "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        )  # fmt: skip
        await self._send(writer, body)

    async def _deep_json(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: text/event-stream")
        depth = 100_000
        await self._send(writer, b"data: " + b"[" * depth + b"]" * depth + b"\n\n")

    async def _bad_charset(self, writer: asyncio.StreamWriter) -> None:
        body = b'{"choices": [{"message": {"content": "\xff\xfe hi"}, "finish_reason": "stop"}]}'
        await self._head(
            writer, "200 OK", "Content-Type: application/json; charset=x-no-such-charset",
            f"Content-Length: {len(body)}",
        )  # fmt: skip
        await self._send(writer, body)

    async def _wide_values(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: text/event-stream")
        model = "m" * 300 + "\x00"
        await self._send(
            writer, _event({"model": model, "choices": [{"delta": {"content": "A\x00B"}}]})
        )
        await self._send(writer, _delta(" explained.", "stop"))
        usage = {"prompt_tokens": 2**40, "completion_tokens": 2**33, "total_tokens": 2**41}
        await self._send(writer, _event({"choices": [], "usage": usage}))
        await self._send(writer, b"data: [DONE]\n\n")

    async def _huge_error(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "500 Internal Server Error", "Content-Type: text/plain")
        await self._repeat(writer, b"error ", BIG)

    async def _deep_models(self, writer: asyncio.StreamWriter) -> None:
        depth = 100_000
        body = b'{"object": "list", "data": ' + b"[" * depth + b"]" * depth + b"}"
        await self._head(
            writer, "200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}"
        )
        await self._send(writer, body)

    async def _drip_models(self, writer: asyncio.StreamWriter) -> None:
        reply = f"HTTP/1.0 200 OK\r\nContent-Length: {len(MODELS)}\r\n\r\n".encode() + MODELS
        for byte in reply:
            await self._send(writer, bytes([byte]))
            await asyncio.sleep(self.drip_seconds)

    async def _huge_models(self, writer: asyncio.StreamWriter) -> None:
        await self._head(writer, "200 OK", "Content-Type: application/json")
        await self._send(writer, b'{"object": "list", "data": [')
        await self._repeat(writer, b'{"id": "m", "object": "model"}, ', 300 * MB)
        await self._send(writer, b'{"id": "m"}]}')

    async def _empty_models(self, writer: asyncio.StreamWriter) -> None:
        await self._head(
            writer,
            "200 OK",
            "Server: BaseHTTP/0.6 Python/3.12.3",
            "Content-type: application/json",
            "Access-Control-Allow-Origin: *",
        )
