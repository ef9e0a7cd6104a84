"""The client, the gate's view of the server and a drain against a real llama.cpp server:
llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, which streams no usage
(``make test-llamacpp`` installs it and runs this module; skipped, with why, without it)."""

from __future__ import annotations

import asyncio
import json
import time
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from studyqueue.models import ExplanationRevision, JobKind, JobStatus, StudyQuestionJob
from studyqueue.monitoring import stats
from studyqueue.services import server_limits
from studyqueue.services.llm import LLMClient
from studyqueue.services.replies import LLMError, LLMReply
from tests.helpers import llamacpp

if reason := llamacpp.missing():
    pytest.skip(reason, allow_module_level=True)

# Slow too: the Django 6.1 run (-m "not slow") leaves it out as make test does.
pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

STORY = [{"role": "user", "content": "Write a long story about a cat who travels the world."}]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory):
    """The server as docs/howto/model-server.md starts it: a new call waits its turn."""
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with llamacpp.server(log=log, interrupt_requests=False) as served:
        yield served


def chats(url: str, *calls: dict) -> list[LLMReply | LLMError]:
    """Each call's ``chat`` keyword arguments, all at once on one client; a call's LLMError
    is its result."""

    async def go() -> list[LLMReply | LLMError]:
        async with LLMClient(base_url=url, temperature=0, max_tokens=32) as client:
            return await asyncio.gather(
                *(client.chat(**({"messages": STORY} | call)) for call in calls),
                return_exceptions=True,
            )

    results = asyncio.run(go())
    for result in results:
        if not isinstance(result, LLMReply | LLMError):
            raise result
    return results


def reply(url: str, **call) -> LLMReply:
    (result,) = chats(url, call)
    assert isinstance(result, LLMReply), result
    return result


def server_count(url: str, text: str) -> int:
    root = url.removesuffix("/v1")
    return httpx.post(f"{root}/extras/tokenize/count", json={"input": text}).json()["count"]


def test_a_stream_cut_at_max_tokens_took_exactly_max_tokens(url):
    """No usage chunk, though asked for: the figures come from the stream, marked counted;
    the prompt's and the cache's tokens stay unknown, never zero."""
    got = reply(url, max_tokens=24)
    assert (got.finish_reason, got.truncated) == ("length", True)
    assert (got.completion_tokens, got.tokens_counted) == (24, True)
    assert (got.prompt_tokens, got.cached_tokens) == (None, None)
    assert got.first_token_ms is not None and got.first_token_ms < got.elapsed_ms
    assert got.tokens_per_second is not None and got.tokens_per_second > 1


@pytest.mark.parametrize(
    "prompt",
    ["Write a short poem about the sea.", "한국어로 답하세요: 고양이에 대해 설명하세요."],
    ids=["english", "korean"],
)
def test_a_reply_that_ends_by_itself_is_counted_by_the_servers_tokenizer(url, prompt):
    """Korean on SmolLM2's byte-level vocabulary streams several tokens in one chunk (a
    syllable spans them): the tokenizer's count, not the chunks'."""
    got = reply(url, messages=[{"role": "user", "content": prompt}], max_tokens=400)
    assert got.finish_reason == "stop", got.content
    assert got.tokens_counted

    async def counted() -> int | None:
        async with LLMClient(base_url=url) as client:
            return await client.tokens_in(got)

    assert asyncio.run(counted()) == server_count(url, got.content)


def test_a_cancelled_call_stops_the_generation(url):
    """The client closes the stream: the server stops generating (the next call would
    otherwise wait behind 2,000 tokens, ~40 s here)."""

    async def go() -> LLMReply:
        async with LLMClient(base_url=url, temperature=0) as client:
            started = asyncio.Event()
            call = asyncio.create_task(
                client.chat(STORY, max_tokens=2000, on_first_token=started.set)
            )
            await started.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return await client.chat(STORY, max_tokens=8)

    after = asyncio.run(go())
    assert after.completion_tokens == 8
    assert after.first_token_ms is not None and after.first_token_ms < 5000


def test_the_server_says_nothing_of_its_capacity_so_the_setting_bounds_the_gate(url):
    """No ``/props``, ``/slots`` or ``/metrics`` (404): an ``auto`` gate climbs no higher
    than ``GATE_MAX_PERMITS``, and the dashboard shows no fault."""

    async def go() -> server_limits.Said:
        async with LLMClient(base_url=url) as client:
            return await server_limits.ask(client)

    said = asyncio.run(go())
    assert said == server_limits.Said()
    assert said.ceiling(max_permits=8) == 8


def test_calls_beyond_one_wait_their_turn(url):
    """It generates one reply at a time: a second call's first token comes after the first
    call ends (why GATE_PERMITS=1 suits it: a second slot only queues)."""
    first, second = sorted(
        chats(url, {"max_tokens": 48}, {"max_tokens": 48}),
        key=lambda r: r.first_token_ms if isinstance(r, LLMReply) else 0,
    )
    assert isinstance(first, LLMReply) and isinstance(second, LLMReply)
    assert first.completion_tokens == second.completion_tokens == 48
    assert second.first_token_ms is not None and second.first_token_ms >= first.elapsed_ms * 0.8


def test_with_its_default_a_newer_call_cuts_the_running_one(tmp_path):
    """Started without ``--interrupt_requests false``, the server ends a stream when another
    call comes (and the newer call, measured, often gets no text either): the cut call is
    never a clean reply, but no text (``llm_empty``, retried) or no finish reason (flagged
    ``unfinished``)."""
    with llamacpp.server(log=tmp_path / "server.log") as served:

        async def go() -> list[LLMReply | BaseException]:
            async with LLMClient(base_url=served, temperature=0) as client:
                started = asyncio.Event()
                first = asyncio.create_task(
                    client.chat(STORY, max_tokens=400, on_first_token=started.set)
                )
                await started.wait()
                second = asyncio.create_task(client.chat(STORY, max_tokens=8))
                return await asyncio.gather(first, second, return_exceptions=True)

        cut, _ = asyncio.run(go())
    if isinstance(cut, LLMReply):
        assert cut.finish_reason == "" and not cut.truncated
        assert cut.completion_tokens is not None and cut.completion_tokens < 400
    else:
        assert isinstance(cut, LLMError) and cut.code == "llm_empty", cut


def test_its_prompt_cache_serves_a_shared_prefix_though_it_reports_none(url):
    """The same long system message again: its prefill is skipped (the first token comes
    far sooner), and the reply still says nothing of cached tokens (unknown, not zero)."""
    system = {"role": "system", "content": "You explain exam questions to students. " * 80}
    ask = [{"role": "user", "content": f"What is {n} + {n}?"} for n in (2, 3)]
    cold = reply(url, messages=[system, ask[0]], max_tokens=4)
    warm = reply(url, messages=[system, ask[1]], max_tokens=4)
    assert cold.first_token_ms is not None and warm.first_token_ms is not None
    assert warm.first_token_ms * 2 < cold.first_token_ms
    assert warm.cached_tokens is None


@pytest.mark.django_db(transaction=True)
def test_a_drain_records_token_figures_and_gives_an_estimate(
    url, settings, make_consumer, tmp_path: Path
):
    """The manual's path: ``importquestions --set --enqueue``, then the consumer. Every
    explanation records its completion tokens (counted) and tokens/s, and for those that
    wait next, ``setstatus`` and the dashboard give an estimate in tokens/s."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "LLM_URL": url,
        "LLM_MAX_TOKENS": 48,
        "LLM_TIMEOUT_SECONDS": 60,
        "KEY_AUDIT_SAMPLES": 1,
        # A tiny model disputes keys at random: no explanation waits for a reviewer here.
        "KEY_AUDIT_HOLDS": False,
    }
    consumer = make_consumer()
    explanations = StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION)
    deadline = time.monotonic() + 240

    def imported(first: int, last: int) -> None:
        questions = tmp_path / f"exam-{first}.jsonl"
        questions.write_text(
            "\n".join(
                json.dumps(
                    {
                        "text": f"What is {n} + {n}?",
                        "choices": [str(n), str(2 * n)],
                        "answer": str(2 * n),
                    }
                )
                for n in range(first, last + 1)
            )
        )
        call_command(
            "importquestions", str(questions), "--set", "exam", "--enqueue", stdout=StringIO()
        )

    imported(1, 4)
    while explanations.filter(status__in=(JobStatus.PENDING, JobStatus.PROCESSING)).exists():
        assert time.monotonic() < deadline, "four explanations within 4 minutes"
        consumer.run_cycle()
    revisions = ExplanationRevision.objects.all()
    assert revisions.count() >= 4
    for revision in revisions:
        assert revision.tokens_counted and revision.completion_tokens, revision.pk
        assert revision.tokens_per_second, revision.pk

    imported(5, 7)  # queued, not yet run: estimated at the pace of the four
    status = StringIO()
    call_command("setstatus", "exam", "--json", stdout=status)
    progress = json.loads(status.getvalue())
    assert progress["waiting"] == 3 and progress["eta_seconds"] is not None, progress
    assert "tok/s" in progress["eta_basis"], progress
    dashboard = stats.collect()
    assert dashboard.backlog_done_in is not None and dashboard.rate is not None
    assert dashboard.rate.tokens_per_second
