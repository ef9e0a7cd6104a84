"""A real llama.cpp server (llama-cpp-python's, SmolLM2-135M-Instruct; ``make llamacpp``
installs it): what a drain records when the server streams no usage, and how good the counts
are.

    python -m bench.llamacpp [--questions 12] [--max-tokens 128] [--runs 3] [--db sqlite]

Starts the server as docs/howto/model-server.md does (``--interrupt_requests false``), then:

- per run, imports ``--questions`` questions (Korean and English), queues and drains them
  (``runconsumer --drain``, gate 1, explanations only): the drain's wall time, how many
  explanations recorded completion tokens (all counted) and tokens/s, their medians, the
  time to first token of the first call (a cold prompt cache) and of the rest, and the
  estimate's basis (``eta.Rate``) as ``setstatus`` would show it;
- once, the same drain at gate 2 over gate 1 (the server serves one call at a time);
- once, the counts themselves: per language, the stream's text chunks over the tokens the
  reply really took (``max_tokens`` for a reply cut there), the undercount that counting
  chunks alone would give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import httpx

from bench.checking_cost import QUESTIONS, drain, write_questions
from bench.common import setup_django
from tests.helpers import llamacpp


def drained(path: str, config: dict[str, Any]) -> dict[str, Any]:
    """One drain of ``path`` and what its explanations recorded."""
    from django.utils import timezone

    from studyqueue.models import ExplanationRevision
    from studyqueue.sets import eta

    wall = drain(path, config)
    rows = list(
        ExplanationRevision.objects.order_by("pk").values_list(
            "completion_tokens", "tokens_counted", "tokens_per_second", "first_token_ms"
        )
    )
    rate = eta.Rate.of(timezone.now())
    return {
        "wall": wall,
        "explanations": len(rows),
        "with_tokens": sum(1 for tokens, *_ in rows if tokens),
        "counted": sum(1 for _, counted, *_ in rows if counted),
        "with_rate": sum(1 for *_, rate, _ in rows if rate),
        "tokens": statistics.median(r[0] or 0 for r in rows),
        "rate": statistics.median(r[2] or 0 for r in rows),
        "first_ttft": rows[0][3],
        "ttft": statistics.median(r[3] or 0 for r in rows[1:]),
        "basis": rate.basis if rate is not None else "no rate",
    }


async def chunks_and_tokens(url: str, prompt: str, max_tokens: int) -> tuple[int, int]:
    """A raw stream's text chunks, and the tokens the reply took: ``max_tokens`` when cut
    there, else the server's count of its text."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    chunks, text, finish = 0, "", ""
    async with httpx.AsyncClient(timeout=120) as http:
        async with http.stream("POST", f"{url}/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                choice = json.loads(line[6:])["choices"][0]
                if content := choice["delta"].get("content"):
                    chunks, text = chunks + 1, text + content
                finish = choice.get("finish_reason") or finish
        if finish == "length":
            return chunks, max_tokens
        root = url.removesuffix("/v1")
        counted = await http.post(f"{root}/extras/tokenize/count", json={"input": text})
        return chunks, counted.json()["count"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128, help="LLM_MAX_TOKENS")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    if reason := llamacpp.missing():
        raise SystemExit(reason)
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    setup_django(args.db)
    with llamacpp.server(interrupt_requests=False) as url:
        base: dict[str, Any] = {
            "LLM_URL": url,
            "LLM_MAX_TOKENS": args.max_tokens,
            "LLM_TIMEOUT_SECONDS": 300,
            "GATE_PERMITS": 1,
            "QUALITY_RETRY": "",
            "KEY_AUDIT": False,
            "VERIFY": False,
            "STEP_CHECK": False,
        }
        print(
            f"llama.cpp: llama-cpp-python with {llamacpp.MODEL_FILE}, db={args.db}"
            f" questions={args.questions} max_tokens={args.max_tokens} runs={args.runs}"
        )
        path = write_questions(args.questions)
        runs = []
        for number in range(1, args.runs + 1):
            run = drained(path, base)
            runs.append(run)
            print(
                f"run {number}: drain {run['wall']:.2f}s; {run['explanations']} explanations,"
                f" {run['with_tokens']} with completion tokens ({run['counted']} counted),"
                f" {run['with_rate']} with tokens/s; median {run['tokens']:g} tokens at"
                f" {run['rate']:.1f} tok/s; ttft first {run['first_ttft']} ms, then median"
                f" {run['ttft']:g} ms; estimate {run['basis']}"
            )
        for name in ("wall", "tokens", "rate", "ttft"):
            print(f"median {name}: {statistics.median(r[name] for r in runs):.2f}")
        started = time.perf_counter()
        two = drain(path, {**base, "GATE_PERMITS": 2})
        one = drain(path, base)
        print(
            f"gate 2 over gate 1: {two:.2f}s / {one:.2f}s = {two / one:.2f}"
            f" ({time.perf_counter() - started:.0f}s)"
        )
        for language, ask, picked in (
            ("Korean", "한국어로 자세히 설명하세요: ", QUESTIONS[0::2]),
            ("English", "Explain in detail: ", QUESTIONS[1::2]),
        ):
            pairs = [
                asyncio.run(chunks_and_tokens(url, ask + text, args.max_tokens))
                for text, _, _ in picked[:4]
            ]
            ratios = [chunks / tokens for chunks, tokens in pairs if tokens]
            print(
                f"{language}: text chunks / tokens taken {statistics.median(ratios):.2f}"
                f" (median of {len(ratios)}: {pairs})"
            )


if __name__ == "__main__":
    main()
