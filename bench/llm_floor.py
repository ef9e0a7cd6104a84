"""The floors for LLM saturation on this machine: the same test LLM server, driven by
three clients with no queue and no database, in turn within each run:

- ``raw``: the leanest client we can write (raw asyncio sockets, next connection opened
  ahead, no parsing beyond finding ``[DONE]``);
- ``httpx``: httpx alone, as the consumer must use it (a streamed POST read line by line;
  the server closes each connection, as mlx_lm.server does, so every call connects);
- ``LLMClient``: studyqueue's client alone (httpx plus the reply's parsing and timings).

With ``--db sqlite|postgres``, two more on a fresh database of that kind, the gate at one
permit in front of ``LLMClient`` (its slots are row leases there, on the gate's own
database thread as in a consumer):

- ``gate``: one caller, so every call takes the slot's lease and gives it back (two
  statements per call between two calls: the gate's worst case);
- ``gate+wait``: two callers, as a consumer keeps the next job waiting at the gate, so the
  slot is handed over inside the process and the lease stays held.

    python -m bench.llm_floor [--calls 200] [--delay 0.05] [--runs 5] [--db sqlite|postgres]

Prints, per client, the wall time against calls x delay and the server's idle time between
two calls, to set beside ``bench.drain_rate``'s gate-1 line: what is left there above the
``LLMClient`` floor is the queue's own cost, and the ``httpx`` floor is as low as any
consumer built on httpx's public API can go. With a database it also prints each gate
line's idle time per call above the ``LLMClient`` floor measured in the same round (the
gate's own cost to the server), the median of the rounds' differences.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django

from bench import common  # puts the checkout on sys.path

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


async def _gated(url: str, calls: int, callers: int) -> None:
    """``calls`` calls through a one-permit gate, shared by ``callers`` callers."""
    from django.db import connections

    from studyqueue.services.gate import LLMGate
    from studyqueue.services.llm import LLMClient

    thread = ThreadPoolExecutor(max_workers=1)  # the consumer's gate thread

    async def run_db(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(thread, fn, *args)

    gate = LLMGate(url, run_db=run_db, permits=1, timeout=60)
    messages = [{"role": "user", "content": "Question:\nfloor\n"}]
    left = calls

    async def caller(client: LLMClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with gate.slot() as slot:
                await client.chat(messages, on_sent=lambda: gate.sent(slot))

    try:
        async with LLMClient(base_url=url) as client:
            await asyncio.gather(*(caller(client) for _ in range(callers)))
    finally:
        thread.submit(connections.close_all).result()
        thread.shutdown()


async def _gate(url: str, port: int, calls: int) -> None:
    await _gated(url, calls, 1)


async def _gate_wait(url: str, port: int, calls: int) -> None:
    await _gated(url, calls, 2)


CLIENTS: dict[str, Callable[[str, int, int], Awaitable[None]]] = {
    "raw": _raw,
    "httpx": _httpx,
    "LLMClient": _llm_client,
}
GATED: dict[str, Callable[[str, int, int], Awaitable[None]]] = {
    "gate": _gate,
    "gate+wait": _gate_wait,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default=None)
    args = parser.parse_args()

    clients = dict(CLIENTS)
    if args.db:
        common.setup_django(args.db)
        clients.update(GATED)
    else:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        django.setup()  # LLMClient reads the studyqueue settings (no database is used)
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess(delay=args.delay, capacity=1)
    gaps: dict[str, list[float]] = {name: [] for name in clients}
    run_p50: dict[str, list[float]] = {name: [] for name in clients}
    walls: dict[str, list[float]] = {name: [] for name in clients}

    def one_round() -> None:
        # Each client in turn: the machine's drift falls on all of them alike.
        for name, drive in clients.items():
            server.reset_stats()
            started = time.perf_counter()
            asyncio.run(drive(server.url, server.port, args.calls))
            walls[name].append((time.perf_counter() - started) / (args.calls * args.delay))
            idle = server.idle_gaps_ms()
            gaps[name].extend(idle)
            run_p50[name].append(statistics.median(idle))

    try:
        for drive in clients.values():
            asyncio.run(drive(server.url, server.port, 5))  # warm-up
        for _ in range(args.runs):
            one_round()
    finally:
        server.stop()
    db = f" db={args.db}" if args.db else ""
    print(f"client floors: calls={args.calls} delay_s={args.delay} runs={args.runs}{db}")
    for name in clients:
        runs = ", ".join(f"{v:.3f}" for v in walls[name])
        idle = sorted(gaps[name])
        print(
            f"{name:9} wall_vs_ideal={statistics.median(walls[name]):.3f} (runs: {runs})"
            f" llm_idle_between_calls_ms p50={statistics.median(idle):.2f}"
            f" p90={idle[int(len(idle) * 0.9)]:.2f} (as seen by the server)"
        )
    for name in GATED if args.db else {}:
        # Paired: each run's p50 less the LLMClient floor's p50 in the same round (the
        # machine's drift falls on both), the median of those differences.
        floors = run_p50["LLMClient"]
        over = [g - f for g, f in zip(run_p50[name], floors, strict=True)]
        per_run = ", ".join(f"{v:+.2f}" for v in over)
        ratio = statistics.median(g / f for g, f in zip(run_p50[name], floors, strict=True))
        print(
            f"{name:9} idle_over_LLMClient_ms={statistics.median(over):+.2f} per call"
            f" (runs: {per_run}) ratio_to_LLMClient={ratio:.2f}x"
        )


if __name__ == "__main__":
    main()
