"""How well a session summary's checks read what it states, on the labelled corpus in the
tests.

    .venv/bin/python -m bench.summary_reader [--runs 5]

Reads ``tests/sessions/summary_corpus.py`` (summaries as models write them, each labelled with
its score figures, the questions it names and those it says were missed, all of a session of 10
questions with 7 right) through ``summaries.check`` and ``reading.read`` and prints: the
sentences with a false score that the check lets agree (goal 0), those with only true scores
that it flags ``score_mismatch`` (goal 0), the sentences with a figure whose meaning is not
in its words that are left unread (goal all), those whose named and missed questions are read
as labelled, and the time per summary (median of ``--runs``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import django

from bench import common  # noqa: F401  (puts the checkout on sys.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="(default: %(default)r)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()  # the answers are model instances (no database is used)
    from studyqueue.explanations import words
    from studyqueue.models import SessionAnswer
    from studyqueue.sessions import reading, summaries
    from tests.sessions.summary_corpus import CORPUS, MISSED, TOTAL

    answers = [SessionAnswer(position=n, correct=n not in MISSED) for n in range(1, TOTAL + 1)]
    false = [c for c in CORPUS if c.false_score]
    true = [c for c in CORPUS if c.scores and not c.false_score]
    unreadable = [c for c in CORPUS if c.unreadable]
    agreed = sum("score_mismatch" not in summaries.check(c.text, answers).flags for c in false)
    flagged = sum("score_mismatch" in summaries.check(c.text, answers).flags for c in true)
    unread = 0
    for c in unreadable:
        figures = tuple(s for f in reading.read(c.text).figures if (s := f.score(TOTAL)))
        unread += figures == c.scores  # nothing read beyond the labelled score
    named = 0
    for c in CORPUS:
        read = reading.read(c.text)
        named += (read.named, read.missed) == (c.named, c.missed)
    runs = []
    for _ in range(args.runs):
        words._analyse.cache_clear()  # time the analyser, not its cache
        started = time.perf_counter()
        for c in CORPUS:
            summaries.check(c.text, answers)
        runs.append((time.perf_counter() - started) / len(CORPUS))
    print(f"corpus: {len(CORPUS)} summaries, {len(false)} with a false score, {len(true)} true")
    print(f"false scores agreed  {agreed}/{len(false)} (goal 0)")
    print(f"true scores flagged  {flagged}/{len(true)} (goal 0)")
    print(f"unreadable unread    {unread}/{len(unreadable)} (goal all)")
    print(f"questions read       {named}/{len(CORPUS)} (named and missed as labelled)")
    print(f"time                 {statistics.median(runs) * 1e6:.0f} us per summary")


if __name__ == "__main__":
    main()
