"""What a server says it can take (``services/server_limits.py``), against the test server
in its llama.cpp-like and vLLM-like modes and as plain as mlx_lm.server; and a consumer with
``GATE_PERMITS=auto`` numbering its gate's slots up to what the server said."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest

from studyqueue.services import server_limits
from studyqueue.services.llm import LLMClient
from studyqueue.services.server_limits import LLAMA_CPP, VLLM, WAITING_CEILING, Said
from tests.helpers import wait_for
from tests.helpers.admin import DASHBOARD_URL

pytestmark = pytest.mark.django_db(transaction=True)


def _said(url: str) -> Said:
    async def ask() -> Said:
        async with LLMClient(base_url=url) as client:
            return await server_limits.ask(client)

    return asyncio.run(ask())


@pytest.mark.parametrize("slots,ceiling", [(12, 12), (4, 4), (1, 1)])
def test_llama_cpp_says_its_slots_and_the_gate_climbs_to_them_not_to_the_setting(
    llm_server, slots, ceiling
):
    llm_server.configure(flavour="llamacpp", capacity=slots)
    said = _said(llm_server.url)
    assert (said.server, said.slots) == (LLAMA_CPP, slots)
    assert said.ceiling(8) == ceiling


def test_vllm_says_what_runs_and_waits_and_may_climb_past_the_setting(llm_server):
    llm_server.configure(flavour="vllm", capacity=2, delay=3)
    said = _said(llm_server.url)
    assert (said.server, said.running, said.waiting) == (VLLM, 0, 0)
    assert said.ceiling(8) == WAITING_CEILING and said.ceiling(100) == 100

    def call() -> None:
        body = b'{"messages": [{"role": "user", "content": "Question:\\nq"}], "stream": false}'
        request = urllib.request.Request(
            f"{llm_server.url}/chat/completions", body, {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=30).read()

    callers = [threading.Thread(target=call) for _ in range(3)]
    for caller in callers:
        caller.start()
    wait_for(lambda: llm_server.stats()["active"] == 2 and llm_server.waiting == 1, timeout=10)
    said = _said(llm_server.url)
    assert (said.running, said.waiting) == (2, 1)
    for caller in callers:
        caller.join(timeout=30)


def test_a_server_that_says_nothing_leaves_the_setting(llm_server):
    said = _said(llm_server.url)  # as mlx_lm.server: 404 on /props, /slots and /metrics
    assert said == Said() and said.ceiling(8) == 8


@pytest.mark.parametrize("slots", [12, 3])
def test_an_auto_consumer_numbers_its_gate_up_to_the_servers_slots(
    llm_server, settings, make_consumer, admin_client, slots
):
    llm_server.configure(flavour="llamacpp", capacity=slots)
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": "auto", "GATE_MAX_PERMITS": 8}
    consumer = make_consumer()
    consumer.run_cycle()
    (member,) = consumer.pool.members
    assert (member.server, member.gate.permits, member.gate.controller.max_limit) == (
        LLAMA_CPP,
        slots,
        slots,
    )
    report = member.report()
    assert (report["ceiling"], report["server"]) == (slots, LLAMA_CPP)
    html = admin_client.get(DASHBOARD_URL).content.decode()
    row = html.split(f'data-endpoint="{llm_server.url}" data-state="up"')[1].split("</tr>")[0]
    assert f"(auto, up to {slots}: what llama.cpp says it takes)" in row


def test_a_fixed_gate_asks_the_server_nothing(llm_server, settings, make_consumer):
    llm_server.configure(flavour="llamacpp", capacity=12)
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": 2}
    consumer = make_consumer()
    consumer.run_cycle()
    (member,) = consumer.pool.members
    assert (member.server, member.gate.permits) == ("", 2)


_GAUGE = (
    'vllm:num_requests_running{{model_name="m"}} {running}\n'
    'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
)


@pytest.mark.parametrize(
    "page,running,waiting,fault",
    [
        (_GAUGE.format(running="+Inf", waiting="1"), None, None, "running = inf: not a count"),
        (_GAUGE.format(running="2", waiting="+Inf"), 2, 0, "waiting = inf: not a count"),
        (_GAUGE.format(running="2", waiting="1e400"), 2, 0, "waiting = inf"),  # parsed as +Inf
        (_GAUGE.format(running="NaN", waiting="NaN"), None, None, "running = nan"),
        (_GAUGE.format(running="-3", waiting="-Inf"), None, None, "running = -3"),
        (_GAUGE.format(running="1", waiting="1e300"), 1, server_limits.GAUGE_MAX, ""),
        ("vllm:num_requests_running{model_name= 3 garbage {{\n\x00\xff", None, None, "not Prom"),
        ("# TYPE vllm:num_requests_running gauge\n" * 100_000, None, None, "over 256 KB"),
    ],
)
def test_a_broken_vllm_metrics_page_never_raises(llm_server, page, running, waiting, fault):
    """Whatever ``/metrics`` holds (inf, nan, garbage, a page larger than the read bound), the
    reader answers: the gauges it could use, or nothing; and what was wrong with the page."""
    llm_server.configure(flavour="vllm", metrics_page=page)
    said = _said(llm_server.url)
    if running is None:
        assert (said.server, said.running, said.waiting) == ("", None, None)
    else:
        assert (said.server, said.running, said.waiting) == (VLLM, running, waiting)
    assert fault in said.fault and bool(said.fault) is bool(fault)


def test_an_auto_consumer_runs_its_jobs_against_a_metrics_page_with_inf(
    llm_server, settings, make_consumer
):
    """``+Inf`` in a gauge used to raise in every cycle, so no job ran."""
    from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

    llm_server.configure(flavour="vllm", metrics_page=_GAUGE.format(running="1", waiting="+Inf"))
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": "auto",
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    for i in range(3):
        StudyQuestionJobFactory(study_question=StudyQuestionFactory(text=f"What is {i} + 1?"))
    consumer = make_consumer()
    assert consumer.run_cycle().outcomes == {"completed": 3}
    assert consumer.pool.members[0].server == VLLM
