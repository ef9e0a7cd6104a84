"""What runs away is shown on the dashboard, not only logged: a webhook that refuses every
notice (a storm, for a set's or a session's), a receiver that holds a notice until its
deadline, and an LLM server whose ``/metrics`` page is unusable. Each is made for real (a
webhook receiver, the test LLM server), a consumer runs its real cycles, a staff member reads
the dashboard; then the condition clears and the warning goes."""

from __future__ import annotations

import pytest

from studyqueue import times
from studyqueue.models import JobAttempt, JobKind, JobStatus, StudyQuestionJob
from studyqueue.queue.operations import retry_ended
from studyqueue.sessions import summaries
from studyqueue.sets import question_sets
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers import wait_for
from tests.helpers.admin import DASHBOARD_URL, staff
from tests.workers import conftest as notice_tests
from tests.workers import test_session_notice

pytestmark = pytest.mark.django_db(transaction=True)

# The notice tests' receiver, with their settings (a webhook, no checks, no backoff).
receiver = notice_tests.receiver


FAILED_NOTICES = "?error_code__exact=webhook_failed"


def _done_set() -> None:
    """A set whose one question is explained: the consumer's sweep queues its notice."""
    question = StudyQuestionFactory(explanation="Four.")
    StudyQuestionJobFactory(
        study_question=question, status=JobStatus.COMPLETED, completed_at=question.created_at
    )
    question_sets.add("midterm", [question.pk])


def _notice_ended(consumer, status: str) -> StudyQuestionJob:
    def ended() -> StudyQuestionJob | None:
        consumer.run_cycle()
        return StudyQuestionJob.objects.filter(kind=JobKind.SET_NOTICE, status=status).first()

    found = wait_for(ended, timeout=30, interval=0.1, what=f"the notice {status}")
    assert found is not None
    return found


def _since(notice: StudyQuestionJob) -> str:
    first = JobAttempt.objects.filter(job=notice).order_by("number").first()
    assert first is not None
    return times.shown(first.started_at)


def test_a_notice_storm_is_shown_until_a_notice_goes_through(receiver, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 3}
    receiver.otherwise = 400
    _done_set()
    consumer = make_consumer()
    client = staff("view_studyquestionjob")
    notice = _notice_ended(consumer, JobStatus.FAILED)
    page = client.get(DASHBOARD_URL).content.decode()
    assert len(receiver.posts) == 3
    assert (
        "<strong>Notices keep failing</strong>: the webhook refused 3 deliveries since "
        f"{_since(notice)}, and none went through." in page
    )
    assert f'href="/admin/studyqueue/studyquestionjob/{FAILED_NOTICES}"' in page
    assert "docs/howto/exam-sets.md" in page and 'id="sq-notice-stuck"' not in page

    receiver.otherwise = 200  # the receiver is fixed; the operator retries the notice
    assert retry_ended([notice.pk]).retried == [notice.pk]
    _notice_ended(consumer, JobStatus.COMPLETED)
    assert len(receiver.posts) == 4
    assert 'id="sq-notice-storm"' not in client.get(DASHBOARD_URL).content.decode()


def test_a_session_notice_storm_is_shown_too(receiver, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 3}
    receiver.otherwise = 400
    session = test_session_notice._session()
    summaries.queue_summaries([session])
    consumer = make_consumer()
    notices = StudyQuestionJob.objects.filter(kind=JobKind.SESSION_NOTICE, status=JobStatus.FAILED)
    wait_for(lambda: consumer.run_cycle() and notices.exists(), timeout=30, what="notice failed")
    page = staff("view_studyquestionjob").get(DASHBOARD_URL).content.decode()
    assert "<strong>Notices keep failing</strong>: the webhook refused 3 deliveries" in page


def test_a_receiver_that_holds_a_notice_to_its_deadline_is_shown(receiver, settings, make_consumer):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 1, "WEBHOOK_TIMEOUT_SECONDS": 1}
    receiver.drip = True  # headers, then a byte every 0.5 s of an answer that never ends
    _done_set()
    consumer = make_consumer()
    client = staff("view_studyquestionjob")
    notice = _notice_ended(consumer, JobStatus.FAILED)
    page = client.get(DASHBOARD_URL).content.decode()
    assert (
        "<strong>The webhook receiver holds notices</strong>: 1 delivery got no complete "
        f"answer within WEBHOOK_TIMEOUT_SECONDS (1 s) since {_since(notice)}." in page
    )
    assert f'href="/admin/studyqueue/studyquestionjob/{FAILED_NOTICES}"' in page
    assert 'id="sq-notice-storm"' not in page  # held, not refused

    receiver.drip = False
    retry_ended([notice.pk])
    _notice_ended(consumer, JobStatus.COMPLETED)
    assert 'id="sq-notice-stuck"' not in client.get(DASHBOARD_URL).content.decode()


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
