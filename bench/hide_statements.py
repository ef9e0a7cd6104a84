"""What the blind verifier is shown: how many statements of the answer the hider hides and how
much of the reasoning it keeps, on the corpus of explanations in the tests.

    .venv/bin/python -m bench.hide_statements [--runs 5]

Reads ``tests/explanations/hiding_corpus.py`` (explanations as models write them, each piece
marked as a statement of the answer or as reasoning) through ``hiding.hide_statements`` and
prints: the share of statements hidden (a statement counts as shown when its text is still in
what the verifier gets once the kept reasoning is taken out; goal 100 %), the share of
reasoning pieces kept as written (goal at least 98 %), the explanations left with none of
their reasoning, those the verifier would not be asked on (``hiding.blind``); the same for the
cases marked ``trap`` alone (with words such as 들어맞다 and 정답률 that hold an answer word),
and for ``tests/explanations/hiding_probe.py``, 16 explanations with such words written by
someone who had not read the hider (goal: 100 % hidden, at least 95 % kept); the time per
explanation (median of ``--runs``) and the process's peak resident memory (the Korean analyser
loaded).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench import common  # noqa: F401  (puts the checkout on sys.path)

if TYPE_CHECKING:
    from tests.explanations.hiding_corpus import Case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="(default: %(default)r)")
    args = parser.parse_args()
    from studyqueue.explanations.hiding import hide_statements
    from tests.explanations.hiding_corpus import CORPUS
    from tests.explanations.hiding_probe import PROBE

    traps = [c for c in CORPUS if c.trap]
    for label, cases in (("all", CORPUS), ("word traps", traps), ("probe", PROBE)):
        measure(label, cases)
    runs = []
    for _ in range(args.runs):
        started = time.perf_counter()
        for case in CORPUS:
            hide_statements(case.text, case.choices)
        runs.append((time.perf_counter() - started) / len(CORPUS))
    print(f"time                {statistics.median(runs) * 1e6:.0f} us per explanation")
    print(f"memory              {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def measure(label: str, cases: Sequence[Case]) -> None:
    """Print what the verifier is shown of ``cases``."""
    from studyqueue.explanations.hiding import blind, hide_statements

    statements = hidden = reasoning = kept = bare = refused = 0
    for case in cases:
        shown = hide_statements(case.text, case.choices)
        rest = shown
        for piece in sorted([*case.reasoning, *case.neutral], key=len, reverse=True):
            rest = rest.replace(piece, " ")
        statements += len(case.statements)
        hidden += sum(piece.strip() not in rest for piece in case.statements)
        reasoning += len(case.reasoning)
        kept += sum(piece in shown for piece in case.reasoning)
        bare += not any(piece in shown for piece in case.reasoning)
        refused += bool(blind(case.text, case.choices).problem)
    print(f"{label}: {len(cases)} explanations, {statements} statements, {reasoning} reasoning")
    print(f"statements hidden   {hidden}/{statements} = {hidden / statements:.1%} (goal 100 %)")
    print(f"reasoning kept      {kept}/{reasoning} = {kept / reasoning:.1%} (goal >= 98 %)")
    print(f"no reasoning left   {bare}/{len(cases)} explanations")
    print(f"verifier not asked  {refused}/{len(cases)} explanations")


if __name__ == "__main__":
    main()
