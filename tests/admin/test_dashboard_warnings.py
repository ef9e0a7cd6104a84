"""What runs away is shown on the dashboard, not only logged: an LLM server whose ``/metrics``
page is unusable. It is made for real (the test LLM server), a consumer runs its real cycles,
a staff member reads the dashboard; then the condition clears and the warning goes."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.helpers.admin import DASHBOARD_URL, staff

pytestmark = pytest.mark.django_db(transaction=True)

_GAUGES = (
    'vllm:num_requests_running{{model_name="m"}} {running}\n'
    'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
)
_FINE = {"metrics_page": _GAUGES.format(running="0", waiting="0"), "metrics_status": 200}


@pytest.mark.parametrize(
    "broken,reason",
    [
        (
            {"metrics_page": _GAUGES.format(running="1", waiting="+Inf")},
            "vllm:num_requests_waiting = inf: not a count",
        ),
        ({"metrics_page": "<html><body>Bad gateway</body></html>"}, "not Prometheus text"),
        ({"metrics_status": 500}, "HTTP 500"),
        ({"metrics_page": "# TYPE x gauge\n" * 20_000}, "no answer, or over 256 KB"),
    ],
    ids=["inf", "not-prometheus", "http-500", "unreadable"],
)
def test_a_broken_metrics_page_is_shown_beside_its_server_within_a_cycle(
    llm_server, settings, make_consumer, broken, reason
):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "GATE_PERMITS": "auto"}
    llm_server.configure(flavour="vllm", **{**_FINE, **broken})
    consumer = make_consumer()
    client = staff("view_studyquestionjob")

    def row() -> str:
        page = client.get(DASHBOARD_URL).content.decode()
        return page.split(f'data-endpoint="{llm_server.url}" data-state="up"')[1].split("</tr>")[0]

    def cycle_shows(text: str, shown: bool) -> bool:
        consumer.run_cycle()
        return (text in row()) is shown

    consumer.run_cycle()  # unusable from the start: its first cycle says so
    assert "its /metrics page is unusable" in row() and reason in row()
    llm_server.configure(**_FINE)
    wait_for(lambda: cycle_shows("/metrics", False), timeout=15, interval=0.2, what="it reads")
    llm_server.configure(**broken)  # and breaks again while the consumer runs
    wait_for(lambda: cycle_shows(reason, True), timeout=15, interval=0.2, what="it shows")
