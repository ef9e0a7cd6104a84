"""The lean HTTP transport against real servers: connections opened ahead, dead spares
replaced, the connection bound, and when httpx's own transport is used instead."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from studyqueue.models import ErrorCode
from studyqueue.services.http_transport import DirectHTTPTransport
from studyqueue.services.llm import LLMClient, LLMError, _direct

MESSAGES = [{"role": "user", "content": "Question:\nWhat is 2 + 2?\n"}]


async def _chats(url: str, n: int, *, concurrent: bool = False, **kwargs) -> list:
    async with LLMClient(base_url=url, **kwargs) as client:
        if concurrent:
            return await asyncio.gather(*(client.chat(MESSAGES) for _ in range(n)))
        return [await client.chat(MESSAGES) for _ in range(n)]


def test_the_next_connection_is_opened_while_a_call_runs(server):
    server.configure(delay=0.05)
    replies = asyncio.run(_chats(server.url, 5))
    assert [r.content for r in replies] == ["Because 2 + 2 equals 4."] * 5
    ages = server.connection_ages
    print(f"connection_age_at_request_s={[round(a, 3) for a in ages]}")
    # The first call connects on the spot; each later one finds a connection that was
    # opened during the previous call (~50 ms earlier).
    assert ages[0] < 0.04
    assert all(age >= 0.04 for age in ages[1:]), ages
    assert server.stats()["requests"] == 5
    assert server.connections == 6  # one per call, plus the spare left when the client closed


async def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` with this loop running, for up to 5 s."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_spare_closed_by_the_server_costs_nothing(server):
    server.configure(delay=0.05)

    async def go() -> None:
        async with LLMClient(base_url=server.url) as client:
            await client.chat(MESSAGES)
            await _until(lambda: server.connections_open() == 1, "only the spare to be open")
            server.stop_idle_connections()
            await _until(lambda: server.connections_open() == 0, "the spare to be closed")
            await client.chat(MESSAGES)

    asyncio.run(go())
    assert server.stats()["requests"] == 2  # no request lost, none sent twice


class _DropFirstOnSpare:
    """A raw HTTP/1.0 server: the second connection (the client's spare) reads the
    request and closes without a reply; every other connection answers."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests_seen: list[int] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # a spare the client closed unused
            return
        length = int(
            next(
                line.split(b":", 1)[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        await reader.readexactly(length)
        self.requests_seen.append(number)
        if number == 2:
            writer.close()  # as if it had timed out the idle connection
            return
        await asyncio.sleep(0.05)  # "generating": the client's spare connects meanwhile
        body = (
            b'data: {"choices": [{"delta": {"content": "four"}, "finish_reason": "stop"}]}\n\n'
            b"data: [DONE]\n\n"
        )
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()


def test_a_dead_spare_is_replaced_by_a_fresh_connection_once():
    async def go() -> tuple[list, _DropFirstOnSpare]:
        srv = _DropFirstOnSpare()
        url = await srv.start()
        try:
            return await _chats(url, 2), srv
        finally:
            await srv.stop()

    replies, srv = asyncio.run(go())
    assert [r.content for r in replies] == ["four", "four"]
    # Call 1 on connection 1; call 2 sent on the spare (2), which died unanswered, then
    # once more on a fresh connection (3 is the next spare, opened as call 2 was sent).
    assert srv.requests_seen[:2] == [1, 2] and len(srv.requests_seen) == 3


def test_an_http11_chunked_stream_is_read_like_vllm_or_ollama_send_it():
    """HTTP/1.1 servers (uvicorn under vLLM, Ollama) stream SSE with chunked encoding."""
    events = [
        b'data: {"choices": [{"delta": {"content": "fo"}}]}\n\n',
        b'data: {"choices": [{"delta": {"content": "ur"}, "finish_reason": "stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    seen_headers: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # the client's spare, closed unused
            return
        seen_headers.append(head)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for event in events:  # one chunk per event, flushed apart
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def go() -> list:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            return await _chats(f"http://127.0.0.1:{port}/v1", 2)
        finally:
            srv.close()

    replies = asyncio.run(go())
    assert [(r.content, r.finish_reason) for r in replies] == [("four", "stop")] * 2
    assert all(b"connection: close" in h.lower() for h in seen_headers)
    assert all(h.startswith(b"POST /v1/chat/completions HTTP/1.1") for h in seen_headers)


def test_connections_are_bounded(server):
    server.configure(delay=0.05)
    asyncio.run(_chats(server.url, 4, concurrent=True, max_connections=2))
    assert server.stats()["max_active"] == 2


def test_pool_timeout_is_an_httpx_timeout(server):
    server.configure(delay=0.5)

    async def go() -> None:
        transport = DirectHTTPTransport(max_connections=1)
        timeout = httpx.Timeout(5.0, pool=0.05)
        url, body = f"{server.url}/chat/completions", {"messages": MESSAGES}
        async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
            first = asyncio.create_task(client.post(url, json=body))
            await _until(lambda: server.stats()["active"] == 1, "the first call to run")
            with pytest.raises(httpx.PoolTimeout):
                await client.post(url, json=body)
            assert (await first).status_code == 200

    asyncio.run(go())


def test_a_server_that_goes_away_mid_reply_is_an_outage(server):
    server.configure(delay=2.0)  # headers and a keep-alive go out at once, tokens at 2 s
    stopper = server.stop_once_active()
    with pytest.raises(LLMError) as info:
        asyncio.run(_chats(server.url, 1))
    stopper.join()
    error = info.value
    assert (error.code, error.affects_all, error.cut_off) == (
        ErrorCode.LLM_UNAVAILABLE,
        True,
        True,
    ), error.message


def test_a_live_server_that_drops_a_reply_is_a_server_error(server):
    server.configure(fault="drop")
    with pytest.raises(LLMError) as info:
        asyncio.run(_chats(server.url, 1))
    assert (info.value.code, info.value.cut_off) == (ErrorCode.LLM_SERVER_ERROR, False)


@pytest.mark.parametrize(
    "url,env,direct",
    [
        ("http://127.0.0.1:8080/v1", {}, True),
        ("https://llm.example/v1", {}, False),
        ("http://10.0.0.5:8080/v1", {"HTTP_PROXY": "http://proxy:3128"}, False),
        ("http://10.0.0.5:8080/v1", {"ALL_PROXY": "http://proxy:3128"}, False),
        (
            "http://10.0.0.5:8080/v1",
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.5"},
            True,
        ),
    ],
)
def test_the_lean_transport_is_used_for_plain_http_without_a_proxy(monkeypatch, url, env, direct):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _direct(url) is direct
