"""How much of each prompt a real LLM server serves from its prompt cache.

    python -m bench.prompt_cache --url http://127.0.0.1:18080/v1 [--questions 20]
        [--words 1000] [--concurrency 1 | --permits auto] [--all-at-once]
        [--layout after|before] [--runs 3]

Sends ``--questions`` different questions, rendered with the app's templates, through
studyqueue's own ``LLMClient``, ``--concurrency`` at a time (1 = gate 1), with a fixed text of
``--words`` words added to the prompt. The first call of a run goes alone and the others
follow once it has ended; ``--all-at-once`` starts them all together instead (a cold prefix
met by ``--concurrency`` calls at once). ``--layout after`` (the shipped templates' layout)
puts it in the system message, which the server can cache; ``--layout before`` puts it in
the user message after the question. Each run starts the
fixed text with a fresh line, so its first call finds nothing cached (a first use).

Prints, per run, the share of prompt tokens the server reports as cached
(``usage.prompt_tokens_details.cached_tokens``; mlx_lm.server and vLLM send it) over all
calls and over all but the first. The client does not keep that field, so the bench reads
it from the bytes on the wire: the client talks to a relay in this process that forwards
everything unchanged to the server.

``--permits auto`` sends the calls through the consumer's adaptive gate instead
(``LLMGate`` with its controller, up to 8 at once, warm-first on the prompt), as
``GATE_PERMITS=auto`` does; the limit it reached is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bench.common import gate_run_db, setup_django

if TYPE_CHECKING:
    from studyqueue.services.gate import LLMGate

OLD_USER_TEMPLATE = """{% autoescape off %}Explain the answer to this study question for a \
learner.

Question:
{{ question.text }}
{% if choices %}
Choices:
{% for choice in choices %}{{ forloop.counter }}. {{ choice }}
{% endfor %}{% endif %}{% if question.answer %}
Correct answer: {{ question.answer }}
{% endif %}
{{ guide }}{% endautoescape %}"""

SENTENCES = [
    "Start from what the learner already knows and name the idea the question tests.",
    "Show each step of the reasoning in its own sentence, in the order it is needed.",
    "When a choice is wrong, say which step it skips or which fact it gets wrong.",
    "Prefer a short worked example to a general rule stated without one.",
    "Use the words of the question; define a technical term the first time it appears.",
    "Check the arithmetic and the units before you state the result.",
    "Do not repeat the question back; do not add greetings or closing remarks.",
    "Keep the explanation under two hundred words unless the question needs more.",
]

USAGE_RE = re.compile(
    rb'"prompt_tokens":\s*(\d+).*?"prompt_tokens_details":\s*\{[^}]*"cached_tokens":\s*(\d+)'
)


def guide(words: int, nonce: str) -> str:
    """A fixed instruction text of about ``words`` words, starting with ``nonce``."""
    out = [f"Style guide, edition {nonce}."]
    n = 0
    while sum(len(s.split()) for s in out) < words:
        out.append(f"Rule {n + 1}. {SENTENCES[n % len(SENTENCES)]}")
        n += 1
    return " ".join(out)


def questions(count: int) -> list[object]:
    from studyqueue.models import StudyQuestion

    made = []
    for i in range(count):
        a, b = 17 + 7 * i, 5 + 3 * i
        made.append(
            StudyQuestion(
                text=f"A crate holds {a} apples and another holds {b}. How many in all?",
                choices=[str(a + b - 1), str(a + b), str(a * b)],
                answer=str(a + b),
            )
        )
    return made


def messages_for(question: object, layout: str, text: str) -> list[dict[str, str]]:
    """The app's messages with the fixed text in the system message (``after``), or the
    layout with it in the user message after the question (``before``)."""
    from django.template import Context, Engine

    from studyqueue.explanations import prompts

    system, user = prompts.build_messages(question)  # type: ignore[arg-type]
    if layout == "after":
        return [{**system, "content": f"{system['content']}\n\n{text}"}, user]
    old = Engine.get_default().from_string(OLD_USER_TEMPLATE)
    context = {"question": question, "choices": question.choices, "guide": text}  # type: ignore[attr-defined]
    content = old.render(Context(context, autoescape=False)).strip()
    system = {"role": "system", "content": "You are a patient tutor."}
    return [system, {"role": "user", "content": content}]


class Relay:
    """A TCP relay to the server that keeps a copy of what the server sends back."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.received = bytearray()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bool) -> None:
            try:
                while chunk := await src.read(65536):
                    if keep:
                        self.received += chunk
                    dst.write(chunk)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))

    def usages(self) -> list[tuple[int, int]]:
        """(prompt_tokens, cached_tokens) of every reply seen so far."""
        return [(int(p), int(c)) for p, c in USAGE_RE.findall(bytes(self.received))]


async def run_once(args: argparse.Namespace) -> tuple[float, float, list[tuple[int, int]]]:
    from studyqueue.services.llm import LLMClient

    parts = urlsplit(args.url)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 80)
    port = await relay.start()
    text = guide(args.words, uuid.uuid4().hex[:8])
    batch = [messages_for(q, args.layout, text) for q in questions(args.questions)]
    url = f"http://127.0.0.1:{port}{parts.path}"
    auto = _auto_gate(url) if args.permits == "auto" else None
    connections = auto.permits if auto is not None else args.concurrency
    async with LLMClient(
        base_url=url, max_tokens=args.max_tokens, timeout=600, max_connections=connections
    ) as client:
        gate = asyncio.Semaphore(args.concurrency)

        async def one(messages: list[dict[str, str]]) -> None:
            if auto is None:
                async with gate:
                    await client.chat(messages)
                return
            async with auto.slot(prefix="bench"):
                reply = await client.chat(messages, on_first_token=lambda: auto.warmed("bench"))
                auto.record(tokens=reply.completion_tokens, seconds=reply.elapsed_ms / 1000)

        if args.all_at_once:  # N calls on a cold prefix at once, as a plain gate N sends them
            await asyncio.gather(*(one(m) for m in batch))
        else:  # one call first (the cold prefix), the others once it has ended
            await one(batch[0])
            await asyncio.gather(*(one(m) for m in batch[1:]))
    if auto is not None:
        print(f"  adaptive gate ended at limit {auto.limit}")
    usages = relay.usages()
    if len(usages) != len(batch):
        raise SystemExit(f"the server reported usage with cached_tokens for {len(usages)} calls")
    share_all = sum(c for _, c in usages) / sum(p for p, _ in usages)
    warm = usages[1:]
    share_warm = sum(c for _, c in warm) / sum(p for p, _ in warm)
    return share_all, share_warm, usages


def _auto_gate(url: str) -> LLMGate:
    """The adaptive gate as a consumer builds it for ``GATE_PERMITS=auto`` (its leases on the
    benchmark's SQLite database, on a thread of their own)."""
    from studyqueue.services.gate import LLMGate
    from studyqueue.services.gate_control import GateController

    controller = GateController(max_limit=8)
    return LLMGate(url, run_db=gate_run_db, timeout=3600, controller=controller)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:18080/v1")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--words", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--permits", choices=["auto"], help="the adaptive gate (GATE_PERMITS=auto)")
    parser.add_argument("--layout", choices=["after", "before"], default="after")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--all-at-once", action="store_true", help="no first call alone: all start together"
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    setup_django("sqlite")
    print(
        f"prompt cache: {args.questions} questions, {args.words}-word fixed text, "
        f"layout {args.layout}, concurrency {args.permits or args.concurrency}, {args.url}"
    )
    alls, warms = [], []
    for run in range(1, args.runs + 1):
        share_all, share_warm, usages = asyncio.run(run_once(args))
        alls.append(share_all)
        warms.append(share_warm)
        first, rest = usages[0], usages[1:]
        print(
            f"  run {run}: cached share {share_all:.3f} (all calls), {share_warm:.3f} "
            f"(after the first); prompt tokens {first[0]}, first call cached {first[1]}, "
            f"others cached {min(c for _, c in rest)}-{max(c for _, c in rest)}"
        )
    print(
        f"median: cached share {statistics.median(alls):.3f} (all calls), "
        f"{statistics.median(warms):.3f} (after the first)"
    )


if __name__ == "__main__":
    main()
