"""A separate process that claims and completes jobs until none are ready.

Prints ``ready`` once Django is set up, waits for a line on stdin (so that all
workers start together), then prints the claimed job ids as one JSON list.
"""

from __future__ import annotations

import json
import sys

import django


def main() -> None:
    worker_id, batch = sys.argv[1], int(sys.argv[2])
    django.setup()
    from studyqueue.queue import transitions as queue
    from studyqueue.queue.transitions import Outcome

    print("ready", flush=True)
    sys.stdin.readline()
    claimed: list[int] = []
    while True:
        jobs = queue.claim(worker_id=worker_id, limit=batch)
        if not jobs:
            break
        for job in jobs:
            claimed.append(job.pk)
            if queue.complete(job) == Outcome.LOST:
                raise SystemExit(f"complete refused for job {job.pk}")
    print(json.dumps(claimed), flush=True)


if __name__ == "__main__":
    main()
