"""What reading a reply costs the worker (its stated answer, its quality flags), beside
what the LLM call costs.

    .venv/bin/python -m bench.answer_parse [--replies 2000] [--runs 5]

Times ``answers.compare`` and ``revisions.flags_for`` (which finds the script of the question
and of the reply) on typical replies (a 1,500-character Korean or English explanation
ending with its answer line) and on a hostile one (8 MB, the default LLM_MAX_REPLY_BYTES,
of answer labels). Prints the median of ``--runs`` runs, per reply, and the share of a
1-second LLM call (the fastest real call) a typical reply costs. Target: under 1 ms a
typical reply, under 100 ms the hostile one, for each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import django

from bench import common  # noqa: F401  (puts the checkout on sys.path)

KOREAN = (
    "서울은 1394년 조선의 수도가 된 이후 지금까지 한국의 수도입니다. 부산은 항구 도시이고, "
    "인천은 국제공항이 있는 도시이며, 대구는 내륙의 큰 도시입니다. " * 12
) + "\n정답: ②"
ENGLISH = (
    "Seoul has been the capital since 1394, under the Joseon dynasty. Busan is a port, "
    "Incheon has the international airport, and Daegu is an inland city. " * 10
) + "\n**Answer:** 2"
HOSTILE = "정답 " * (8 * 1024 * 1024 // 3)


def per_call(read: Callable[[], object], count: int) -> float:
    """Seconds per call of ``read``, over ``count`` calls."""
    start = time.perf_counter()
    for _ in range(count):
        read()
    return (time.perf_counter() - start) / count


def readers(reply: str, choices: list[str], key: str) -> dict[str, Callable[[], object]]:
    """The store's two passes over a reply: its stated answer, and its quality flags (with a
    question in the reply's language)."""
    from studyqueue.explanations import answers, revisions

    korean = "정답" in reply
    question = "다음 중 한국의 수도는 어디입니까?" if korean else "Which city is the capital?"
    return {
        "answer": lambda: answers.compare(reply, choices, key),
        "flags": lambda: revisions.flags_for(question, reply, "stop"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=2000, help="(default: %(default)r)")
    parser.add_argument("--runs", type=int, default=5, help="(default: %(default)r)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()  # the quality flags read the studyqueue settings (no database is used)
    cases = [
        ("korean, 1.5 kB", KOREAN, ["부산", "서울", "인천", "대구"], "서울", args.replies),
        ("english, 1.5 kB", ENGLISH, ["Busan", "Seoul", "Incheon", "Daegu"], "B", args.replies),
        ("hostile, 8 MB of labels", HOSTILE, ["부산", "서울"], "서울", 1),
    ]
    for what in ("answer", "flags"):
        for name, reply, choices, key, count in cases:
            read = readers(reply, choices, key)[what]
            runs = [per_call(read, count) for _ in range(args.runs)]
            median = statistics.median(runs)
            print(
                f"{what:6} {name:26} median {median * 1e6:10.1f} us/reply "
                f"(runs: {', '.join(f'{r * 1e6:.1f}' for r in runs)}) "
                f"= {median / 1.0:.5%} of a 1 s LLM call"
            )


if __name__ == "__main__":
    main()
