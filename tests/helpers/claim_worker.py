"""A separate process that claims and completes jobs until none are ready.

Prints ``ready`` once Django is set up, waits for a line on stdin (so that all
workers start together); claims its first batch, prints ``holding N`` (N jobs) and waits for
another line while it holds them (so that every worker holds a claim at once, whatever the
OS scheduler does); then prints the claimed job ids as one JSON list.
"""

from __future__ import annotations

import json
import sys

import django


def main() -> None:
    worker_id, batch = sys.argv[1], int(sys.argv[2])
    django.setup()
    from studyqueue.queue import transitions
    from studyqueue.queue.transitions import Outcome

    print("ready", flush=True)
    sys.stdin.readline()
    claimed: list[int] = []
    holding = True
    while True:
        jobs = transitions.claim(worker_id=worker_id, limit=batch)
        if holding:
            print(f"holding {len(jobs)}", flush=True)
            sys.stdin.readline()
            holding = False
        if not jobs:
            break
        for job in jobs:
            claimed.append(job.pk)
            if transitions.complete(job) == Outcome.LOST:
                raise SystemExit(f"complete refused for job {job.pk}")
    print(json.dumps(claimed), flush=True)


if __name__ == "__main__":
    main()
