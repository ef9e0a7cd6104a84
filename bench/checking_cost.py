"""What the checks cost: key audits, blind verification and step checks beside the
explanations, on a real LLM server.

    python -m bench.checking_cost --url http://127.0.0.1:18090/v1 [--questions 12]
        [--max-tokens 256] [--samples 3] [--model ID] [--db sqlite|postgres] [--runs 3]

Start the server first (e.g. ``../shared/mlx/serve.sh --port 18090 --eos-every 0``: a tiny
mlx_lm.server whose replies always run to ``max_tokens``, so every explanation has the same,
realistic length). Each run imports ``--questions`` questions with four choices and a key
(``importquestions``), queues them (``enqueue --missing``) and drains the queue
(``runconsumer --drain``, gate 1) twice, each time on emptied tables:

- A, checks on (``KEY_AUDIT`` with ``--samples`` samples, ``VERIFY``, ``STEP_CHECK``): one key
  audit, one explanation, one verification and one step check per question;
- B, checks off: the explanations alone.

Prints, per run, both drains' wall time and the overhead A / B - 1, and run A's spending by job
kind from ``explanations.check_cost``: attempts, prompt and completion tokens, LLM time, and its
step checks' verdicts (ok, wrong_step, unsure); then
the checks' generated tokens over the explanations' (``token_share``) and the checks' LLM time
over the explanations' (``time_share``). The medians over the runs come last, beside the
targets (checking at most 25 % of the explanations' generated tokens, at most 15 % of the wall
time). Ratios are taken within a run (A and B one after the other), so a machine loaded by
something else shifts both drains alike. One untimed drain of two questions warms the server
first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from io import StringIO
from typing import TYPE_CHECKING, Any

from bench.common import reset_tables, setup_django

if TYPE_CHECKING:
    from studyqueue.explanations.check_cost import VersionCost

TOKEN_TARGET = 0.25  # checking's generated tokens over the explanations'
WALL_TARGET = 0.15  # drain with checks over drain without, minus one

# (text, choices, key): general knowledge, Korean and English, four choices each.
QUESTIONS: list[tuple[str, list[str], str]] = [
    ("대한민국의 수도는 어디입니까?", ["부산", "서울", "인천", "대구"], "서울"),
    (
        "What is the largest planet in the Solar System?",
        ["Mars", "Earth", "Jupiter", "Venus"],
        "Jupiter",
    ),
    ("한글을 창제한 조선의 왕은 누구입니까?", ["태조", "세종", "정조", "영조"], "세종"),
    (
        "Which gas do plants take in for photosynthesis?",
        ["Oxygen", "Nitrogen", "Carbon dioxide", "Helium"],
        "Carbon dioxide",
    ),
    ("물의 끓는점은 1기압에서 섭씨 몇 도입니까?", ["50도", "90도", "100도", "120도"], "100도"),
    (
        "Who wrote 'Romeo and Juliet'?",
        ["Charles Dickens", "William Shakespeare", "Jane Austen", "Mark Twain"],
        "William Shakespeare",
    ),
    ("지구에서 가장 넓은 대양은 무엇입니까?", ["대서양", "인도양", "북극해", "태평양"], "태평양"),
    ("How many continents are there on Earth by the usual count?", ["5", "6", "7", "8"], "7"),
    ("빛의 삼원색에 속하지 않는 것은 무엇입니까?", ["빨강", "초록", "파랑", "노랑"], "노랑"),
    ("What is the chemical symbol for gold?", ["Ag", "Au", "Gd", "Go"], "Au"),
    ("한국의 전통 명절 중 음력 8월 15일은 무엇입니까?", ["설날", "단오", "추석", "한식"], "추석"),
    (
        "Which organ pumps blood through the human body?",
        ["Liver", "Lungs", "Kidney", "Heart"],
        "Heart",
    ),
    ("태양계에서 태양에 가장 가까운 행성은 무엇입니까?", ["금성", "수성", "화성", "지구"], "수성"),
    ("What is 12 multiplied by 12?", ["124", "144", "132", "154"], "144"),
    ("독도는 어느 바다에 있습니까?", ["동해", "서해", "남해", "황해"], "동해"),
    (
        "Which metal is liquid at room temperature?",
        ["Iron", "Mercury", "Copper", "Zinc"],
        "Mercury",
    ),
]
KINDS = ("explanation", "key_audit", "verification", "step_check")
CHECKS_ON = {"KEY_AUDIT": True, "VERIFY": True, "STEP_CHECK": True}  # run A; run B: all off


@dataclass
class Run:
    """One run's two drains and run A's spending."""

    wall_a: float
    wall_b: float
    cost: VersionCost
    explained_b: int  # completion tokens of run B's explanations
    explained_b_ms: int  # and their LLM time
    steps: dict[str, int]  # run A's step check verdicts (ok, wrong_step, unsure)

    @property
    def overhead(self) -> float:
        return self.wall_a / self.wall_b - 1


@dataclass
class Medians:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(name, []).append(value)

    def __getitem__(self, name: str) -> float:
        return statistics.median(self.values[name])


def write_questions(count: int) -> str:
    """A JSON Lines file of ``count`` questions (the list repeated, numbered past its end)."""
    path = os.path.join(tempfile.mkdtemp(prefix="sq-bench-"), "questions.jsonl")
    with open(path, "w", encoding="utf-8") as out:
        for i in range(count):
            text, choices, answer = QUESTIONS[i % len(QUESTIONS)]
            if i >= len(QUESTIONS):
                text = f"({i // len(QUESTIONS) + 1}) {text}"
            row = {"external_id": f"q{i}", "text": text, "choices": choices, "answer": answer}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def drain(path: str, config: dict[str, Any]) -> float:
    """Empty tables, ``path`` imported and queued, the queue drained with ``config``: the
    drain's wall time in seconds (every job must end completed)."""
    from django.conf import settings
    from django.core.management import call_command

    from studyqueue.models import JobAttempt, StudyQuestionJob

    reset_tables()
    assert not JobAttempt.objects.exists(), "attempts left from the last run"
    settings.STUDYQUEUE = config
    quiet = StringIO()
    call_command("importquestions", path, stdout=quiet, stderr=quiet)
    call_command("enqueue", "--missing", stdout=quiet, stderr=quiet)
    started = time.perf_counter()
    call_command("runconsumer", "--drain", verbosity=0)
    elapsed = time.perf_counter() - started
    unfinished = StudyQuestionJob.objects.exclude(status="completed")
    if unfinished.exists():
        rows = unfinished.values_list("pk", "kind", "status", "error_code", "error_message")
        raise SystemExit("jobs not completed after the drain:\n" + "\n".join(map(str, rows)))
    return elapsed


def total_cost() -> VersionCost:
    """``check_cost.collect()`` summed over its prompt versions (one, here; a key audit of a
    question left unexplained would count under ``""``)."""
    from studyqueue.explanations.check_cost import KindCost, VersionCost, collect

    kinds: dict[str, KindCost] = {}
    for version in collect().values():
        for kind, cost in version.kinds.items():
            into = kinds.setdefault(kind, KindCost())
            into.attempts += cost.attempts
            into.prompt_tokens += cost.prompt_tokens
            into.completion_tokens += cost.completion_tokens
            into.llm_ms += cost.llm_ms
    return VersionCost("all", kinds)


def one_run(path: str, base: dict[str, Any], samples: int) -> Run:
    from django.db.models import Count

    from studyqueue.models import ExplanationRevision

    wall_a = drain(path, {**base, **CHECKS_ON, "KEY_AUDIT_SAMPLES": samples})
    cost = total_cost()
    verdicts = ExplanationRevision.objects.values_list("step_check").annotate(n=Count("pk"))
    steps = {verdict or "not checked": n for verdict, n in verdicts}
    wall_b = drain(path, {**base, **dict.fromkeys(CHECKS_ON, False)})
    plain = total_cost()
    if set(plain.kinds) != {"explanation"}:
        raise SystemExit(f"checks ran with every check off: {sorted(plain.kinds)}")
    written = plain.of("explanation")
    return Run(wall_a, wall_b, cost, written.completion_tokens, written.llm_ms, steps)


def share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def print_kinds(cost: VersionCost, indent: str) -> None:
    for kind in KINDS:
        c = cost.of(kind)
        print(
            f"{indent}{kind:<13} attempts={c.attempts:<3} prompt_tokens={c.prompt_tokens:<6}"
            f" completion_tokens={c.completion_tokens:<6} llm_ms={c.llm_ms}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:18090/v1")
    parser.add_argument("--model", default="", help="LLM_MODEL (default: the server's own)")
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=256, help="LLM_MAX_TOKENS")
    parser.add_argument("--samples", type=int, default=3, help="KEY_AUDIT_SAMPLES")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "ERROR")  # no line per flagged explanation
    setup_django(args.db)

    base: dict[str, Any] = {
        "LLM_URL": args.url,
        "LLM_MODEL": args.model,
        "LLM_MAX_TOKENS": args.max_tokens,
        "GATE_PERMITS": 1,
        "BATCH_SIZE": 1,
        "QUALITY_RETRY": "",
        "KEY_AUDIT_HOLDS": False,
    }
    print(
        f"checking cost: db={args.db} questions={args.questions} max_tokens={args.max_tokens}"
        f" key_audit_samples={args.samples} gate=1 runs={args.runs} {args.url}"
    )
    drain(write_questions(2), {**base, **CHECKS_ON})  # warm-up
    path = write_questions(args.questions)
    runs: list[Run] = []
    medians = Medians()
    for number in range(1, args.runs + 1):
        run = one_run(path, base, args.samples)
        runs.append(run)
        cost = run.cost
        print(
            f"run {number}: drain A (checks on) {run.wall_a:.2f}s, B (checks off)"
            f" {run.wall_b:.2f}s, overhead {run.overhead:+.3f}; token_share"
            f" {share(cost.token_share)}, time_share {share(cost.time_share)};"
            f" B's explanations: completion_tokens={run.explained_b} llm_ms={run.explained_b_ms}"
        )
        print_kinds(cost, "  A: ")
        print(f"  A: step check verdicts {dict(sorted(run.steps.items()))}")
        medians.add("wall_a", run.wall_a)
        medians.add("wall_b", run.wall_b)
        medians.add("overhead", run.overhead)
        medians.add("token_share", cost.token_share)
        medians.add("time_share", cost.time_share)
        for kind in KINDS:
            c = cost.of(kind)
            for name in ("attempts", "prompt_tokens", "completion_tokens", "llm_ms"):
                medians.add(f"{kind}.{name}", getattr(c, name))

    print(f"median over {args.runs} run(s), run A by kind:")
    for kind in KINDS:
        print(
            f"  {kind:<13} attempts={medians[f'{kind}.attempts']:g}"
            f" prompt_tokens={medians[f'{kind}.prompt_tokens']:g}"
            f" completion_tokens={medians[f'{kind}.completion_tokens']:g}"
            f" llm_ms={medians[f'{kind}.llm_ms']:g}"
        )
    print(
        f"median drain wall: A {medians['wall_a']:.2f}s, B {medians['wall_b']:.2f}s;"
        f" wall overhead A/B-1 {medians['overhead']:+.3f}"
        f" (runs: {', '.join(f'{r.overhead:+.3f}' for r in runs)})"
    )
    token_share = medians["token_share"] if "token_share" in medians.values else None
    time_share = medians["time_share"] if "time_share" in medians.values else None
    print(
        f"median token_share {share(token_share)} (target <= {TOKEN_TARGET:.2f}),"
        f" time_share {share(time_share)}, wall overhead {medians['overhead']:+.3f}"
        f" (target <= {WALL_TARGET:.2f})"
    )
    met_tokens = token_share is not None and token_share <= TOKEN_TARGET
    met_wall = medians["overhead"] <= WALL_TARGET
    print(
        f"target: checking <= {TOKEN_TARGET:.0%} of the explanations' generated tokens"
        f" {'met' if met_tokens else 'NOT met'}; <= {WALL_TARGET:.0%} of wall time"
        f" {'met' if met_wall else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
