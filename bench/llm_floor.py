"""The floors for LLM saturation on this machine: the same test LLM server, driven by
three clients with no queue and no database, in turn within each run:

- ``raw``: the leanest client we can write (raw asyncio sockets, next connection opened
  ahead, no parsing beyond finding ``[DONE]``);
- ``httpx``: httpx alone, as the consumer must use it (a streamed POST read line by line;
  the server closes each connection, as mlx_lm.server does, so every call connects);
- ``LLMClient``: studyqueue's client alone (httpx plus the reply's parsing and timings).

    python -m bench.llm_floor [--calls 200] [--delay 0.05] [--runs 5]

Prints, per client, the wall time against calls x delay and the server's idle time between
two calls, to set beside ``bench.drain_rate``'s gate-1 line: what is left there above the
``LLMClient`` floor is the queue's own cost, and the ``httpx`` floor is as low as any
consumer built on httpx's public API can go.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import django

from bench import common  # noqa: F401  (puts the checkout on sys.path)

BODY = (
    b'{"messages": [{"role": "user", "content": "Question:\\nfloor\\n"}],'
    b' "stream": true, "stream_options": {"include_usage": true}}'
)


async def _raw(url: str, port: int, calls: int) -> None:
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    ) + BODY
    ahead = asyncio.ensure_future(asyncio.open_connection("127.0.0.1", port))
    for _ in range(calls):
        reader, writer = await ahead
        writer.write(request)
        ahead = asyncio.ensure_future(asyncio.open_connection("127.0.0.1", port))
        seen = b""
        while b"[DONE]" not in seen:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError("the server closed before [DONE]")
            seen = seen[-16:] + chunk
        writer.close()
    (await ahead)[1].close()


async def _httpx(url: str, port: int, calls: int) -> None:
    import httpx

    headers = {"Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(calls):
            request = client.stream(
                "POST", f"{url}/chat/completions", content=BODY, headers=headers
            )
            async with request as reply:
                async for line in reply.aiter_lines():
                    if line == "data: [DONE]":
                        break


async def _llm_client(url: str, port: int, calls: int) -> None:
    from studyqueue.services.llm import LLMClient

    messages = [{"role": "user", "content": "Question:\nfloor\n"}]
    async with LLMClient(base_url=url) as client:
        for _ in range(calls):
            await client.chat(messages)


CLIENTS: dict[str, Callable[[str, int, int], Awaitable[None]]] = {
    "raw": _raw,
    "httpx": _httpx,
    "LLMClient": _llm_client,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()  # LLMClient reads the studyqueue settings (no database is used)
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess(delay=args.delay, capacity=1)
    gaps: dict[str, list[float]] = {name: [] for name in CLIENTS}
    walls: dict[str, list[float]] = {name: [] for name in CLIENTS}

    def one_round() -> None:
        # Each client in turn: the machine's drift falls on all three alike.
        for name, drive in CLIENTS.items():
            server.reset_stats()
            started = time.perf_counter()
            asyncio.run(drive(server.url, server.port, args.calls))
            walls[name].append((time.perf_counter() - started) / (args.calls * args.delay))
            gaps[name].extend(server.idle_gaps_ms())

    try:
        for drive in CLIENTS.values():
            asyncio.run(drive(server.url, server.port, 5))  # warm-up
        for _ in range(args.runs):
            one_round()
    finally:
        server.stop()
    print(f"client floors: calls={args.calls} delay_s={args.delay} runs={args.runs}")
    for name in CLIENTS:
        runs = ", ".join(f"{v:.3f}" for v in walls[name])
        idle = sorted(gaps[name])
        print(
            f"{name:9} wall_vs_ideal={statistics.median(walls[name]):.3f} (runs: {runs})"
            f" llm_idle_between_calls_ms p50={statistics.median(idle):.2f}"
            f" p90={idle[int(len(idle) * 0.9)]:.2f} (as seen by the server)"
        )


if __name__ == "__main__":
    main()
