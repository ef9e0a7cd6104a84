"""How well a session summary's checks read what it states, on the labelled corpus in the
tests.

    .venv/bin/python -m bench.summary_reader [--runs 5]

Reads ``tests/sessions/summary_corpus.py`` (summaries as models write them, each labelled with
its score figures, the questions it names and those it says were missed, all of a session of 10
questions with 7 right) through ``summaries.check`` and ``reading.read`` and prints: the
sentences with a false score that the check lets agree (goal 0), those with only true scores
that it flags ``score_mismatch`` (goal 0), the sentences with a figure whose meaning is not
in its words that are left unread (goal all), those whose named and missed questions are read
as labelled, and the time per summary (median of ``--runs``); then, on
``tests/sessions/summary_probe.py`` (80 sentences written by someone who had not read the
reader), the false scores it lets agree, the true ones it flags, the sentences with no score
it reads one in (goal 0 each) and the scores it leaves unread.
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
    probe(answers)


def probe(answers: list) -> None:
    """The same figures on ``tests/sessions/summary_probe.py``, written apart from the reader."""
    from studyqueue.sessions import reading, summaries
    from tests.sessions.summary_probe import PROBE

    said = {s: summaries.check(s.text, answers) for s in PROBE}
    by = {label: [s for s in PROBE if s.score == label] for label in ("true", "false", "none")}
    agreed = sum(
        "score_mismatch" not in said[s].flags and bool(said[s].stated) for s in by["false"]
    )
    flagged = sum("score_mismatch" in said[s].flags for s in by["true"] + by["none"])
    read = sum(bool(said[s].stated) for s in by["none"])
    unread = sum(not said[s].stated for s in by["true"] + by["false"])
    print(f"probe: {len(PROBE)} sentences written apart from the reader")
    print(f"false scores agreed  {agreed}/{len(by['false'])} (goal 0)")
    print(f"true scores flagged  {flagged}/{len(by['true']) + len(by['none'])} (goal 0)")
    print(f"no score, one read   {read}/{len(by['none'])} (goal 0)")
    print(f"scores left unread   {unread}/{len(by['true']) + len(by['false'])}")
    named = 0
    for s in PROBE:
        read = reading.read(s.text)
        named += (read.named, read.missed) == (s.named, s.missed)
    print(f"questions read       {named}/{len(PROBE)} (named and missed as labelled)")


if __name__ == "__main__":
    main()
