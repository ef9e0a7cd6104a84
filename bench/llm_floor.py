"""The floor for LLM saturation on this machine: the same test LLM server, driven by the
leanest client we can write (raw asyncio sockets, next connection opened ahead, no queue,
no database, no parsing beyond finding ``[DONE]``).

    python -m bench.llm_floor [--calls 200] [--delay 0.05] [--runs 5]

Prints the wall time against calls x delay and the server's idle time between two calls,
to set beside ``bench.drain_rate``'s gate-1 line: what is left there above this floor is
the consumer's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.common import median_of

BODY = (
    b'{"messages": [{"role": "user", "content": "Question:\\nfloor\\n"}],'
    b' "stream": true, "stream_options": {"include_usage": true}}'
)


async def _drive(port: int, calls: int) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess(delay=args.delay, capacity=1)
    gaps: list[float] = []

    def one_run() -> float:
        server.reset_stats()
        started = time.perf_counter()
        asyncio.run(_drive(server.port, args.calls))
        elapsed = time.perf_counter() - started
        gaps.extend(server.idle_gaps_ms())
        return elapsed / (args.calls * args.delay)

    try:
        asyncio.run(_drive(server.port, 5))  # warm-up
        median, values = median_of(args.runs, one_run)
    finally:
        server.stop()
    runs = ", ".join(f"{v:.3f}" for v in values)
    idle = sorted(gaps)
    print(f"raw client floor: calls={args.calls} delay_s={args.delay} runs={args.runs}")
    print(f"wall_vs_ideal={median:.3f} (runs: {runs})")
    print(
        f"llm_idle_between_calls_ms p50={statistics.median(idle):.2f}"
        f" p90={idle[int(len(idle) * 0.9)]:.2f} (as seen by the server)"
    )


if __name__ == "__main__":
    main()
