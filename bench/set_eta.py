"""How honest a question set's ETA is: its error against the real remaining time, as the set
fills in.

    python -m bench.set_eta [--questions 60] [--runs 3] [--delay 0.3] [--jitter 0.5] [--gate 2]

A set of ``--questions`` questions is imported and queued, and ``runconsumer --drain`` works
it off against a test LLM server in a process of its own whose every reply takes ``--delay``
seconds times 1 +/- up to ``--jitter`` (noisy latency), ``--gate`` calls at once. Meanwhile
the set's progress (``question_sets.progress``, what ``setstatus`` and the admin show) is
read every 0.2 s. Once the drain is over, each estimate is compared with the time that
really remained: error = |ETA - remaining| / remaining. Prints, per tenth of the set done,
the median error over the runs, and the error right after 10 % was done (target: within
25 %). SQLite; medians over ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from io import StringIO

from bench.common import setup_django


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--jitter", type=float, default=0.5)
    parser.add_argument("--gate", type=int, default=2)
    args = parser.parse_args()
    setup_django("sqlite")
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from bench.common import reset_tables
    from studyqueue.models import StudyQuestion, StudyQuestionSet
    from studyqueue.queue.enqueue import enqueue_many
    from studyqueue.sets import question_sets
    from tests.llm_server import LLMServerProcess

    server = LLMServerProcess()
    server.configure(delay=args.delay, delay_jitter=args.jitter, capacity=args.gate)
    settings.STUDYQUEUE = {
        "LLM_URL": server.url,
        "GATE_PERMITS": args.gate,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    print(
        f"{args.questions} questions, replies {args.delay:g} s +/- {args.jitter:.0%}, "
        f"gate {args.gate}, {args.runs} runs"
    )
    by_tenth: dict[int, list[float]] = {}
    at_ten: list[float] = []
    for run in range(args.runs):
        reset_tables()
        StudyQuestion.objects.bulk_create(
            StudyQuestion(text=f"What is {i} + {run}?") for i in range(args.questions)
        )
        ids = list(StudyQuestion.objects.values_list("pk", flat=True))
        question_set, _ = question_sets.add(f"bench {run}", ids)
        enqueue_many(ids)
        samples: list[tuple[float, int, float | None]] = []
        draining = threading.Event()
        draining.set()

        def watch(
            question_set: StudyQuestionSet = question_set,
            samples: list[tuple[float, int, float | None]] = samples,
            draining: threading.Event = draining,
        ) -> None:
            # In a thread of its own (its own connection); the drain keeps the main thread,
            # where runconsumer sets its signal handlers.
            try:
                while draining.is_set():
                    progress = question_sets.progress(question_set)
                    done = progress.explained + progress.failed
                    samples.append((time.monotonic(), done, progress.eta_seconds))
                    time.sleep(0.2)
            finally:
                connections.close_all()

        watcher = threading.Thread(target=watch)
        started = time.monotonic()
        watcher.start()
        call_command("runconsumer", "--drain", stdout=StringIO())
        ended = time.monotonic()
        draining.clear()
        watcher.join()
        connections.close_all()
        first_after_ten = None
        for at, done, estimate in samples:
            remaining = ended - at
            if estimate is None or remaining <= 0.5 or done >= args.questions:
                continue
            error = abs(estimate - remaining) / remaining
            by_tenth.setdefault(10 * done // args.questions, []).append(error)
            if first_after_ten is None and done >= args.questions / 10:
                first_after_ten = error
        if first_after_ten is not None:
            at_ten.append(first_after_ten)
        print(
            f"run {run + 1}: drained in {ended - started:.1f} s, {len(samples)} readings, "
            f"error just after 10 % done: "
            + ("-" if first_after_ten is None else f"{first_after_ten:.0%}")
        )
    print("done | median error of the ETA | readings")
    for tenth in sorted(by_tenth):
        errors = by_tenth[tenth]
        print(f"{tenth * 10}-{tenth * 10 + 10} % | {statistics.median(errors):.0%} | {len(errors)}")
    if at_ten:
        print(
            f"just after 10 % done: median error {statistics.median(at_ten):.0%} "
            f"(runs: {', '.join(f'{e:.0%}' for e in at_ten)}; target <= 25 %)"
        )
    server.stop()


if __name__ == "__main__":
    main()
