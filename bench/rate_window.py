"""An endpoint's per-call bookkeeping with its rate window full: does it stay flat?

    python -m bench.rate_window [--calls 12000 60000] [--runs 5]

The pool keeps every call of the last ``RATE_WINDOW_SECONDS`` (ten minutes) for an endpoint's
call time and tokens/s, and reads them at every call (choosing the endpoint, storing the
reply, reporting). ``--calls``: how many calls the window holds (12,000: ten minutes of 50 ms
calls at gate 1; 60,000: of an instant server). Prints one call's bookkeeping in ms (the
median of ``--runs`` rounds of 500), which the event loop spends between two calls. Target:
flat (the same at 60,000 as at 12,000) and under 0.01 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[12_000, 60_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from studyqueue.services.endpoints import Endpoint
    from studyqueue.services.gate import LLMGate
    from studyqueue.services.llm import LLMClient
    from studyqueue.services.pool import Member

    async def no_database(*args: object, **kwargs: object) -> None:
        raise AssertionError("the bookkeeping asks no database")

    url = "http://127.0.0.1:9/v1"
    for calls in args.calls:
        member = Member(
            Endpoint(url), LLMClient(base_url=url), LLMGate(url, permits=1, run_db=no_database)
        )
        for _ in range(calls):
            member.served(100, 0.05)

        def one_call(member: Member = member) -> None:
            member.expected_wait(1.0)
            member.served(100, 0.05)
            member.tokens_per_second()

        runs = [timeit.timeit(one_call, number=500) / 500 * 1000 for _ in range(args.runs)]
        print(f"calls_in_window={calls:6} ms_per_call={statistics.median(runs):.4f}")
    print("target: flat, and under 0.01 ms a call")


if __name__ == "__main__":
    main()
