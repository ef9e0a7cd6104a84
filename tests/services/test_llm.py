"""The LLM client against a real HTTP server with injected faults."""

from __future__ import annotations

import asyncio
import logging

import pytest

from studyqueue.models import ErrorCode
from studyqueue.services.llm import LLMClient, LLMError, LLMReply, parse_retry_after

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
    assert reply.content == "Because 2 + 2 equals 4."
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


def test_refused_connection_is_unavailable(free_port):
    error = chat_error(f"http://127.0.0.1:{free_port}/v1")
    assert error.code == ErrorCode.LLM_UNAVAILABLE and error.affects_all


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
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0
