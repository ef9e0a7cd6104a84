"""The LLM client against a real HTTP server with injected faults."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import struct
import time

import pytest

from studyqueue.models import ErrorCode
from studyqueue.queue.enqueue import enqueue
from studyqueue.services.llm import TOKENIZE_SECONDS, LLMClient, Probe, probe_servers
from studyqueue.services.replies import (
    MIN_DECODE_SPAN_MS,
    LLMError,
    LLMReply,
    ReplyParser,
    decode_rate,
    parse_retry_after,
)
from tests.llm_server import ANSWER

MESSAGES = [{"role": "user", "content": "Question:\nWhat is 2 + 2?\n"}]


def chat(url: str, **kwargs) -> LLMReply:
    async def go() -> LLMReply:
        async with LLMClient(base_url=url, **kwargs) as client:
            return await client.chat(MESSAGES)

    return asyncio.run(go())


def chat_error(url: str, **kwargs) -> LLMError:
    with pytest.raises(LLMError) as info:
        chat(url, **kwargs)
    return info.value


@pytest.mark.parametrize("ignore_stream", [False, True], ids=["stream", "whole-json"])
def test_reply_is_parsed_with_usage(server, ignore_stream):
    server.configure(ignore_stream=ignore_stream)
    reply = chat(server.url, model="m1")
    assert reply.content == ANSWER
    assert (reply.model, reply.finish_reason, reply.truncated) == ("m1", "stop", False)
    assert (reply.prompt_tokens, reply.completion_tokens) == (42, 7)
    assert reply.elapsed_ms >= 0


def test_no_model_is_sent_when_none_is_configured(server):
    assert chat(server.url).model == "default_model"


def test_api_key_is_sent_as_bearer_and_never_logged(server, caplog):
    caplog.set_level(logging.DEBUG)
    chat(server.url, api_key="sk-very-secret")
    assert server.last_authorization == "Bearer sk-very-secret"
    assert "sk-very-secret" not in caplog.text


def test_refused_connection_is_unavailable_and_never_reached_the_server(free_port):
    error = chat_error(f"http://127.0.0.1:{free_port}/v1")
    assert error.code == ErrorCode.LLM_UNAVAILABLE and error.affects_all
    assert not error.reached_server


@pytest.mark.parametrize("worked", [0.0, 2.0])
def test_a_server_that_hangs_up_without_a_reply_is_unavailable_and_never_asked_twice(
    server, worked
):
    """It read the request (and worked on it for ``worked`` seconds) before it closed the
    connection: it may have done the work, so the call is not sent again; it fails as an
    outage that reached the server."""
    server.configure(fault="hangup", delay=worked)
    error = chat_error(server.url)
    assert (error.code, error.affects_all, error.reached_server) == (
        ErrorCode.LLM_UNAVAILABLE,
        True,
        True,
    ), error.message
    assert server.stats()["requests"] == 1


@pytest.mark.parametrize(
    "fault,code,affects_all",
    [
        ("500", ErrorCode.LLM_SERVER_ERROR, False),
        ("503", ErrorCode.LLM_OVERLOADED, True),
        ("400", ErrorCode.LLM_REJECTED, False),
        ("404", ErrorCode.LLM_REJECTED, True),
        ("malformed", ErrorCode.LLM_BAD_RESPONSE, False),
        ("null", ErrorCode.LLM_EMPTY, False),
        ("drop", ErrorCode.LLM_SERVER_ERROR, False),
    ],
)
def test_faults_map_to_error_codes(server, fault, code, affects_all):
    server.configure(fault=fault)
    error = chat_error(server.url)
    assert (error.code, error.affects_all) == (code, affects_all), error.message


def test_malformed_whole_json_reply(server):
    server.configure(fault="malformed", ignore_stream=True)
    assert chat_error(server.url).code == ErrorCode.LLM_BAD_RESPONSE


def test_429_honours_retry_after(server):
    server.configure(fault="429", retry_after="7")
    error = chat_error(server.url)
    assert error.code == ErrorCode.LLM_OVERLOADED
    assert error.retry_after == 7
    assert "too many requests" in error.message


def test_wrong_path_is_a_rejection_for_everyone(server):
    error = chat_error(server.url.replace("/v1", "/nope"))
    assert error.code == ErrorCode.LLM_REJECTED and error.affects_all
    assert "Not Found" in error.message


def test_a_url_without_v1_is_the_servers_fault_and_names_the_url_meant(server):
    """A 404 where the calls go ran no model: it keeps the job's attempt (like a refused
    connection) and says which URL was probably meant."""
    root = server.url.removesuffix("/v1")
    error = chat_error(root)
    assert (error.code, error.affects_all, error.reached_server) == (
        ErrorCode.LLM_REJECTED,
        True,
        False,
    )
    assert f"at {root}/chat/completions; did you mean {root}/v1?" in error.message


def test_slow_reply_times_out_and_closes_the_connection(server):
    server.configure(fault="slow", slow_seconds=3)
    error = chat_error(server.url, timeout=0.3)
    assert error.code == ErrorCode.LLM_TIMEOUT
    assert server.stats()["requests"] == 1


def test_cut_reply_is_flagged_truncated(server):
    server.configure(fault="length")
    reply = chat(server.url)
    assert reply.truncated and reply.content


def test_parse_retry_after():
    assert parse_retry_after("3") == 3
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    # A date in the past, or a negative delay, is no advice: the caller's backoff applies.
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("-5") is None
    assert parse_retry_after("0") == 0


async def _chats(
    url: str, n: int, *, concurrent: bool = False, messages: list = MESSAGES, **kwargs
) -> list:
    async with LLMClient(base_url=url, **kwargs) as client:
        if concurrent:
            return await asyncio.gather(*(client.chat(messages) for _ in range(n)))
        return [await client.chat(messages) for _ in range(n)]


def test_connections_are_bounded(server):
    server.configure(delay=0.05)
    asyncio.run(_chats(server.url, 4, concurrent=True, max_connections=2))
    assert server.stats()["max_active"] == 2


def test_a_server_that_goes_away_mid_reply_is_an_outage(server):
    server.configure(delay=2.0)  # headers and a keep-alive go out at once, tokens at 2 s
    stopper = server.stop_once_active()
    with pytest.raises(LLMError) as info:
        asyncio.run(_chats(server.url, 1))
    stopper.join()
    error = info.value
    assert (error.code, error.affects_all) == (ErrorCode.LLM_UNAVAILABLE, True), error.message
    assert error.message.startswith("reply cut off and the server is gone")


def test_a_live_server_that_drops_a_reply_is_a_server_error(server):
    server.configure(fault="drop")
    with pytest.raises(LLMError) as info:
        asyncio.run(_chats(server.url, 1))
    assert (info.value.code, info.value.affects_all) == (ErrorCode.LLM_SERVER_ERROR, False)


SSE_EVENTS = [
    b'data: {"choices": [{"delta": {"content": "fo"}}]}\n\n',
    b'data: {"choices": [{"delta": {"content": "ur"}, "finish_reason": "stop"}]}\n\n',
    b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n',
    b"data: [DONE]\n\n",
]


class _KeepAliveServer:
    """A raw HTTP/1.1 server that streams SSE with chunked encoding (as uvicorn under vLLM,
    or Ollama, do) and keeps each connection open for the next request."""

    def __init__(self, replies_per_connection: int = 0) -> None:
        self.connections = 0
        self.request_lines: list[bytes] = []
        # >0: the next request on a connection that served this many is met by a close
        # (a reset) once its head came, before its body is read, as llama.cpp's
        # llama-server closes kept-alive connections.
        self.replies_per_connection = replies_per_connection

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.request_lines.append(head.split(b"\r\n")[0])
                if served == self.replies_per_connection > 0:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.close()
                    return
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                served += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for event in SSE_EVENTS:  # one chunk per event, flushed apart
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # the client closed the connection


def _serve(handler, calls) -> list:  # type: ignore[no-untyped-def]
    async def go() -> list:
        srv = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            return await calls(f"http://127.0.0.1:{port}/v1")
        finally:
            srv.close()

    return asyncio.run(go())


def test_an_http11_chunked_stream_is_read_and_its_connection_kept_alive():
    srv = _KeepAliveServer()
    replies = _serve(srv.handle, lambda url: _chats(url, 3))
    assert [(r.content, r.finish_reason) for r in replies] == [("four", "stop")] * 3
    assert srv.request_lines == [b"POST /v1/chat/completions HTTP/1.1"] * 3
    assert srv.connections == 1, "keep-alive: three calls on one connection"


def test_a_kept_alive_connection_closed_as_the_request_goes_out_is_retried_on_a_new_one():
    """llama.cpp's llama-server closes kept-alive connections: a request that meets the close
    before it is wholly written (a prompt larger than the sockets' buffers, whose body the
    server never read) was not taken, and is sent again on a new connection, never an
    outage."""
    srv = _KeepAliveServer(replies_per_connection=1)
    big = [{"role": "user", "content": "x" * (32 * 1024 * 1024)}]
    replies = _serve(srv.handle, lambda url: _chats(url, 3, messages=big))
    assert [r.content for r in replies] == ["four"] * 3
    # Calls 2 and 3 each met a closing connection, then went out on a new one.
    assert (len(srv.request_lines), srv.connections) == (5, 3)


def test_system_proxy_settings_are_honoured(monkeypatch):
    """HTTP_PROXY routes the call through the proxy, as for any httpx client."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    srv = _KeepAliveServer()  # stands in for the proxy: it answers whatever it is asked

    async def via_proxy(proxy_url: str) -> list:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.removesuffix("/v1"))
        return await _chats("http://llm.internal:8080/v1", 1)

    (reply,) = _serve(srv.handle, via_proxy)
    assert reply.content == "four"
    assert srv.request_lines == [b"POST http://llm.internal:8080/v1/chat/completions HTTP/1.1"]


def test_retry_after_that_is_not_a_number_gives_no_advice():
    assert parse_retry_after("nan") is None
    assert parse_retry_after("inf") is None
    assert parse_retry_after("1e30") == 86400
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT") == 86400


# --------------------------------------------------------------------------- secrets

INVALID_KEYS = [
    "sk-0123456789\r\n",
    "sk-0123\r\nX-Injected: 456789",
    "sk-0123456789é",
    "sk-01234 56789",
]


@pytest.mark.parametrize("key", INVALID_KEYS, ids=["crlf-end", "crlf-inside", "non-ascii", "space"])
def test_an_invalid_key_is_never_sent_by_a_call_or_a_probe(server, key):
    async def go() -> tuple[LLMError, Probe]:
        async with LLMClient(base_url=server.url, api_key=key) as client:
            with pytest.raises(LLMError) as info:
                await client.chat(MESSAGES)
            return info.value, await client.probe()

    error, probe = asyncio.run(go())
    assert error.code == ErrorCode.LLM_REJECTED and error.affects_all and not error.reached_server
    assert error.message.startswith("LLM_API_KEY is invalid")
    assert (probe.status, probe.models) == (None, None)
    assert probe.detail.startswith("LLM_API_KEY is invalid")
    assert "0123" not in error.message + probe.detail
    assert server.stats()["requests"] == 0


def test_url_credentials_travel_as_basic_auth_and_never_into_a_log(server, caplog):
    """httpx logs each request's URL (INFO): it never gets the one with credentials."""
    caplog.set_level(logging.DEBUG)
    reply = chat(server.url.replace("://", "://llmuser:pa55%40word@"))
    assert reply.content == ANSWER
    assert server.last_authorization == "Basic " + base64.b64encode(b"llmuser:pa55@word").decode()
    assert "HTTP Request: POST http://127.0.0.1:" in caplog.text  # the line is there, clean
    for secret in ("pa55", "llmuser", base64.b64encode(b"llmuser:pa55@word").decode()):
        assert secret not in caplog.text


def test_the_probe_counts_the_models_it_is_served(server):
    async def go() -> Probe:
        async with LLMClient(base_url=server.url, api_key="sk-0123456789") as client:
            return await client.probe()

    assert asyncio.run(go()) == Probe(200, 1, "")
    assert probe_servers([(server.url, ""), (server.url + "/nope", "")]) == [
        Probe(200, 1, ""),
        Probe(404, None, "HTTP 404", chat_status=404),
    ]


def test_the_probe_tries_the_calls_path_when_there_is_no_model_list(server):
    """A URL without /v1 answers 404 to GET /models: the probe asks the chat path, which
    answers 404 too (a path that exists refuses the empty request instead)."""
    root = server.url.removesuffix("/v1")
    (probe,) = probe_servers([(root, "")])
    assert probe.chat_path_missing
    assert server.stats()["requests"] == 0, "no chat completion ran"


def _keys(value: object) -> set[str]:
    """Every key of a JSON body, at any depth (a ``seed`` nested in options counts too)."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.parametrize(
    "client_kwargs,max_tokens",
    [
        ({}, None),
        ({"model": "m1"}, None),
        ({"model": "m1", "temperature": 0.0}, None),  # greedy: where a seed is most tempting
        ({"max_tokens": 64, "temperature": 1.0}, 2048),
    ],
    ids=["server-default", "model", "greedy", "per-call-max-tokens"],
)
@pytest.mark.parametrize("ignore_stream", [False, True], ids=["stream", "whole-json"])
def test_no_request_carries_a_seed(server, client_kwargs, max_tokens, ignore_stream):
    """A request with ``seed`` is never batched by mlx_lm.server: none is sent."""
    server.configure(ignore_stream=ignore_stream)

    async def go() -> None:
        async with LLMClient(base_url=server.url, **client_kwargs) as client:
            await client.chat(MESSAGES, max_tokens=max_tokens)

    asyncio.run(go())
    assert server.bodies, "the server saw no request"
    for body in server.bodies:
        assert "seed" not in _keys(body), body
        assert body["messages"] == MESSAGES


@pytest.mark.django_db(transaction=True)
def test_no_job_request_carries_a_seed(llm_server, settings, make_consumer):
    """The consumer's own requests: a first explanation, and a regeneration with its own
    ``max_tokens``, with a model and greedy sampling configured."""
    from studyqueue.models import StudyQuestionJob
    from tests.factories import StudyQuestionFactory

    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_MODEL": "m1", "LLM_TEMPERATURE": 0}
    first = enqueue(StudyQuestionFactory(text="What is 2 + 2?", choices=["3", "4"])).job
    second = enqueue(StudyQuestionFactory(text="Why is the sky blue?")).job
    StudyQuestionJob.objects.filter(pk=second.pk).update(max_tokens=2048)
    assert make_consumer().run_cycle().outcomes == {"completed": 2}
    assert len(llm_server.bodies) == 2
    for body in llm_server.bodies:
        assert "seed" not in _keys(body), body
    assert {body["max_tokens"] for body in llm_server.bodies} == {1024, 2048}
    assert first.pk != second.pk


# ------------------------------------------------- cached tokens and the decode rate


@pytest.mark.parametrize("ignore_stream", [False, True], ids=["stream", "whole-json"])
def test_cached_tokens_are_read_from_the_usage(server, ignore_stream):
    server.configure(ignore_stream=ignore_stream, prompt_tokens=500, cached_tokens=448)
    reply = chat(server.url)
    assert (reply.prompt_tokens, reply.cached_tokens) == (500, 448)


@pytest.mark.parametrize(
    ("cached", "expected"),
    [(None, None), (0, 0), (-1, None), (True, None), ("12", None), (2**40, 500)],
    ids=["absent", "zero", "negative", "bool", "text", "above-the-prompt"],
)
def test_cached_tokens_are_clamped_like_the_other_counts(server, cached, expected):
    """Not an integer: unknown; more than the prompt: the prompt (a share above 1 is nonsense)."""
    server.configure(prompt_tokens=500, cached_tokens=cached)
    assert chat(server.url).cached_tokens == expected


@pytest.mark.parametrize("details", ['"448"', "[448]", "null", '{"cached_tokens": 4.5}'])
def test_details_that_are_not_an_object_of_counts_say_nothing(details):
    parser = ReplyParser()
    parser.feed_body(
        b'{"choices": [{"message": {"content": "Four."}, "finish_reason": "stop"}],'
        b' "usage": {"prompt_tokens": 9, "prompt_tokens_details": %s}}' % details.encode()
    )
    assert parser.reply().cached_tokens is None


def test_the_decode_rate_is_tokens_after_the_first_over_the_first_to_last_span(server):
    server.configure(answer="a b c d e f g h i j k", word_delay=0.05, completion_tokens=11)
    reply = chat(server.url)
    assert reply.first_token_ms is not None and reply.last_token_ms is not None
    # Ten gaps of 50 ms as sent; a loaded client may read the first word late, so the
    # span it measures is only known to be above the minimum.
    span = reply.last_token_ms - reply.first_token_ms
    assert span >= MIN_DECODE_SPAN_MS
    assert reply.tokens_per_second == round(10 * 1000 / span, 2)


def test_a_stream_without_usage_counts_its_text_chunks_and_says_so(server):
    """llama-cpp-python's server streams no usage: the chunks that carried text are the
    completion tokens (marked counted), and the decode rate comes from them; the prompt's
    tokens stay unknown, never a zero."""
    server.configure(answer="a b c d e f g h i j k", word_delay=0.02, stream_usage=False)
    reply = chat(server.url)
    assert (reply.completion_tokens, reply.tokens_counted) == (11, True)
    assert (reply.prompt_tokens, reply.cached_tokens) == (None, None)
    assert reply.first_token_ms is not None and reply.last_token_ms is not None
    span = reply.last_token_ms - reply.first_token_ms
    assert reply.tokens_per_second == decode_rate(11, span) and reply.tokens_per_second


def test_a_stream_without_usage_is_counted_by_the_servers_tokenizer_where_it_has_one(server):
    """llama.cpp's ``/tokenize`` counts the text (text chunks miss the tokens of a character
    that spans several); the first tokenizer path, which 404s here, is not asked again."""
    server.configure(flavour="llamacpp", stream_usage=False)

    async def go() -> list[int | None]:
        async with LLMClient(base_url=server.url) as client:
            return [await client.tokens_in(await client.chat(MESSAGES)) for _ in range(2)]

    assert asyncio.run(go()) == [len(ANSWER)] * 2
    assert server.unknown_posts == ["/extras/tokenize/count"]


def test_a_tokenizer_that_hangs_leaves_the_chunk_count_within_its_own_deadline(server):
    server.configure(flavour="llamacpp", stream_usage=False, tokenize_delay=5)

    async def go() -> tuple[LLMReply, int | None, float]:
        async with LLMClient(base_url=server.url) as client:
            reply = await client.chat(MESSAGES)
            started = time.monotonic()
            return reply, await client.tokens_in(reply), time.monotonic() - started

    reply, count, waited = asyncio.run(go())
    assert (reply.completion_tokens, reply.tokens_counted, count) == (
        len(ANSWER.split(" ")),
        True,
        None,
    )
    assert waited < TOKENIZE_SECONDS + 0.5


def test_a_stream_without_usage_cut_at_max_tokens_took_max_tokens(server):
    server.configure(stream_usage=False, fault="length")

    async def go() -> LLMReply:
        async with LLMClient(base_url=server.url, max_tokens=64) as client:
            return await client.chat(MESSAGES)

    reply = asyncio.run(go())
    assert (reply.completion_tokens, reply.tokens_counted, reply.truncated) == (64, True, True)


def test_reported_usage_is_never_marked_counted(server):
    reply = chat(server.url)
    assert (reply.completion_tokens, reply.tokens_counted) == (7, False)


def test_a_whole_body_without_usage_has_no_token_figures():
    """One JSON body has no chunks to count: unknown, not a count of one."""
    parser = ReplyParser()
    parser.feed_body(b'{"choices": [{"message": {"content": "Four."}, "finish_reason": "stop"}]}')
    reply = parser.reply()
    assert (reply.completion_tokens, reply.tokens_counted, reply.tokens_per_second) == (
        None,
        False,
        None,
    )


def test_decode_rate_needs_two_tokens_and_a_minimum_span():
    assert decode_rate(None, 500) is None
    assert decode_rate(1, 500) is None
    assert decode_rate(2, MIN_DECODE_SPAN_MS - 1) is None
    assert decode_rate(2, MIN_DECODE_SPAN_MS) == 20.0
    assert decode_rate(31, 1000) == 30.0
    assert decode_rate(31, None) is None


@pytest.mark.parametrize("ignore_stream", [False, True], ids=["stream", "whole-json"])
def test_on_sent_comes_once_the_request_is_written_before_any_reply(server, ignore_stream):
    server.configure(ignore_stream=ignore_stream)
    events: list[str] = []

    async def go() -> LLMReply:
        async with LLMClient(base_url=server.url) as client:
            return await client.chat(
                MESSAGES,
                on_sent=lambda: events.append("sent"),
                on_first_token=lambda: events.append("first token"),
            )

    assert asyncio.run(go()).content == ANSWER
    assert events[0] == "sent" and events.count("sent") == 1


def test_on_sent_never_comes_when_nothing_was_sent(free_port):
    sent: list[str] = []

    async def go() -> None:
        async with LLMClient(base_url=f"http://127.0.0.1:{free_port}/v1") as client:
            await client.chat(MESSAGES, on_sent=lambda: sent.append("sent"))

    with pytest.raises(LLMError):
        asyncio.run(go())
    assert sent == []
