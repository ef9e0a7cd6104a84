"""The sessions API: ``POST /studyqueue/api/sessions`` and ``GET .../<id>/summary``, over
Django's test client and a real database."""

from __future__ import annotations

import http.client
import io
import json
import logging
import threading

import pytest
from django.db import connections, transaction
from django.test import Client

from studyqueue.models import (
    JobKind,
    SessionSummary,
    StudyQuestion,
    StudyQuestionJob,
    StudySession,
)
from studyqueue.sessions import summaries
from studyqueue.sets import question_sets
from studyqueue.views import MAX_BODY
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.helpers.processes import api_under_gunicorn

pytestmark = pytest.mark.django_db

URL = "/studyqueue/api/sessions"
TOKEN = "tok-en-2"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
OFF = "Sessions API: off (set STUDYQUEUE_API_TOKENS and restart to turn it on)."


@pytest.fixture
def tokens(settings) -> None:
    settings.STUDYQUEUE = {"API_TOKENS": f"tok-en-1, {TOKEN},"}


@pytest.fixture
def questions() -> None:
    StudyQuestionFactory.create(external_id="geo-1", choices=["부산", "서울"], answer="서울")
    StudyQuestionFactory.create(external_id="geo-2", choices=["동해", "서해"], answer="동해")


def session(**changes: object) -> dict:
    record = {
        "external_id": "s-104",
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:25:00+09:00",
        "answers": [
            {"question": "geo-1", "chosen": 2, "seconds": 31},
            {"question": "geo-2", "chosen": 2},
        ],
    }
    return {**record, **changes}


def post(client: Client, body: object, **extra: object):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data, content_type="application/json", **{**AUTH, **extra})


def summary_jobs() -> list[StudyQuestionJob]:
    return list(StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY))


def test_with_no_token_configured_the_api_says_it_is_off(client, questions):
    for response in (post(client, session()), client.get(f"{URL}/s-104/summary", **AUTH)):
        assert response.status_code == 404
        assert response.json() == {"errors": [OFF]}
    assert not StudySession.objects.exists()


@pytest.mark.parametrize(
    "authorization", [f"bearer {TOKEN}", f"BEARER   {TOKEN}", f"Bearer  {TOKEN}"]
)
def test_the_bearer_scheme_is_any_case_and_any_run_of_spaces(
    tokens, questions, client, authorization
):
    assert post(client, session(), HTTP_AUTHORIZATION=authorization).status_code == 201


def test_a_valid_bearer_token_is_needed(tokens, questions, admin_client):
    for response in (
        post(Client(), session(), HTTP_AUTHORIZATION=""),
        post(Client(), session(), HTTP_AUTHORIZATION="Bearer wrong"),
        post(Client(), session(), HTTP_AUTHORIZATION=TOKEN),  # no "Bearer "
        post(admin_client, session(), HTTP_AUTHORIZATION=""),  # an admin login is no token
        Client().get(f"{URL}/s-104/summary"),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert response.json() == {"errors": ["a valid bearer token is needed"]}
    assert not StudySession.objects.exists()
    assert post(Client(), session(), HTTP_AUTHORIZATION="Bearer tok-en-1").status_code == 201


def test_other_methods_are_refused(tokens, client):
    assert client.get(URL, **AUTH).status_code == 405
    assert client.put(URL, "{}", **AUTH).status_code == 405
    assert client.post(f"{URL}/s-104/summary", **AUTH).status_code == 405


def test_a_new_session_is_recorded_and_its_summary_queued(tokens, questions):
    client = Client(enforce_csrf_checks=True)  # a token, not a cookie: no CSRF token needed
    response = post(client, session())
    assert response.status_code == 201
    (recorded,) = StudySession.objects.all()
    assert (recorded.right, recorded.total) == (1, 2)
    expected = {"id": recorded.pk, "session": "s-104", "summary_url": f"{URL}/s-104/summary"}
    assert response.json() == expected
    (job,) = summary_jobs()
    assert job.study_session_id == recorded.pk
    # The missed question's explanation, which the summary waits on.
    assert StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).count() == 1

    again = post(client, session())
    assert again.status_code == 200
    assert again.json() == expected
    assert StudySession.objects.count() == 1 and summary_jobs() == [job]


def test_the_same_external_id_with_other_content_is_a_conflict(tokens, questions, client):
    assert post(client, session()).status_code == 201
    response = post(client, session(learner="lee-02"))
    assert response.status_code == 409
    assert response.json() == {"errors": ["session s-104 was recorded before with other content"]}
    assert StudySession.objects.get().learner == "kim-07"
    assert len(summary_jobs()) == 1


@pytest.mark.parametrize(
    "body,errors",
    [
        ("{not json", ["the body is not JSON"]),
        (b"\xff\xfe{", ["the body is not JSON"]),
        ("[" * 100_000, ["the body is not JSON"]),
        ([], ["a session must be a JSON object"]),
        (
            session(learner="", answers=[{"question": "geo-9", "chosen": 1}]),
            ["learner is missing", 'answer 1: unknown question "geo-9"'],
        ),
        (
            session(answers=[{"question": {"id": [1]}, "chosen": 1}]),
            ['answer 1: unknown question {"id": [1]}'],
        ),
        (
            session(answers=[{"question": {"id": 10**30}, "chosen": 1}]),
            [f'answer 1: unknown question {{"id": {10**30}}}'],
        ),
        (
            '{"learner": "kim", "answers": [{"question": "\\ud800", "chosen": 1}]}',
            [
                "started_at is missing",
                "ended_at is missing",
                'answer 1: unknown question "\\ud800"',
            ],
        ),
        (
            session(started_at="0001-01-01T00:00:00+09:00"),
            ["started_at is not a date and time like 2026-12-01T09:00:00+09:00 (years 1-9999 UTC)"],
        ),
        (
            session(ended_at="9999-12-31T23:00:00-05:00"),
            ["ended_at is not a date and time like 2026-12-01T09:00:00+09:00 (years 1-9999 UTC)"],
        ),
        (session(set="2026 기말"), ["no question set named '2026 기말'"]),
        (
            session(ended_at="2026-12-01T08:00:00+09:00"),
            ["ended_at is before started_at"],
        ),
    ],
)
def test_a_bad_body_is_refused_with_its_reasons(tokens, questions, client, body, errors):
    question_sets.add("2026 midterm", [])  # never named to a client that did not name it
    response = post(client, body)
    assert response.status_code == 400
    assert response.json() == {"errors": errors}
    assert not StudySession.objects.exists() and not StudyQuestionJob.objects.exists()


def test_a_body_over_the_limit_is_refused(tokens, questions, client):
    big = json.dumps(session(learner="k" * MAX_BODY))
    response = post(client, big)
    assert response.status_code == 413
    assert "errors" in response.json()
    assert not StudySession.objects.exists()


def chunked(body: bytes) -> dict[str, object]:
    """A body of unknown length as gunicorn hands a chunked one to Django: no CONTENT_LENGTH,
    the decoded stream, and ``wsgi.input_terminated`` (it ends where the body does)."""
    return {"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True, "CONTENT_LENGTH": ""}


def test_a_body_of_unknown_length_is_read_within_the_limit(tokens, questions, client):
    big = json.dumps(session(learner="k" * MAX_BODY)).encode()
    assert post(client, "", **chunked(big)).status_code == 413
    good = json.dumps(session()).encode()
    assert post(client, "", **chunked(good)).status_code == 201


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_gunicorn_reads_a_chunked_body(questions, child_env, python, free_port):
    bind = f"127.0.0.1:{free_port}"

    def send(chunks: list[bytes]) -> int:
        connection = http.client.HTTPConnection(bind, timeout=30)
        try:  # an iterable body, no length: http.client sends it chunked
            connection.request("POST", URL, iter(chunks), {"Authorization": f"Bearer {TOKEN}"})
            return connection.getresponse().status
        except OSError:
            return 0  # not listening yet
        finally:
            connection.close()

    with api_under_gunicorn(python, child_env, bind, TOKEN):
        wait_for(lambda: send([b"[]"]) == 400, what="gunicorn")
        body = json.dumps(session()).encode()
        assert send([body[:100], body[100:]]) == 201
    assert StudySession.objects.get().external_id == "s-104"


def test_tokens_never_reach_the_logs(tokens, questions, client, caplog):
    caplog.set_level(logging.DEBUG)
    post(client, session())
    post(client, session())
    post(client, session(learner="other"))
    post(client, "nope")
    post(client, session(), HTTP_AUTHORIZATION="Bearer tok-en-wrong")
    client.get(f"{URL}/s-104/summary", **AUTH)
    lines = [record.getMessage() for record in caplog.records]
    pk = StudySession.objects.get().pk
    assert f"api_request session={pk} outcome=created status=201" in lines
    assert f"api_request session={pk} outcome=known status=200" in lines
    assert "api_request outcome=conflict status=409" in lines
    assert "api_request outcome=unauthorized status=401" in lines
    assert "tok-en" not in caplog.text


def test_the_summary_before_and_after_it_is_written(tokens, questions, client):
    post(client, session())
    url = f"{URL}/s-104/summary"
    before = client.get(url, **AUTH)
    assert before.status_code == 200
    got = before.json()
    assert (got["session"], got["right"], got["total"]) == ("s-104", 1, 2)
    assert (got["status"], got["waiting_on"], got["text"]) == ("waiting", "explanations", "")

    recorded = StudySession.objects.get()
    summary = SessionSummary.objects.create(
        session=recorded,
        text="2문제 중 1문제를 맞혔습니다.",
        stated={"right": 1, "total": 2},
        flags=["missed_not_mentioned"],
    )
    with transaction.atomic():
        summaries.make_current(summary)
    after = client.get(url, **AUTH).json()
    assert after == summaries.as_json(StudySession.objects.get())
    assert (after["status"], after["text"]) == ("written", "2문제 중 1문제를 맞혔습니다.")
    assert after["flags"] == ["missed_not_mentioned"]
    assert after["written_at"] == summary.created_at.isoformat()


def test_an_unknown_session_is_a_json_404(tokens, client):
    for key in ("s-404", "12345", "9" * 30):
        response = client.get(f"{URL}/{key}/summary", **AUTH)
        assert response.status_code == 404
        assert response.json() == {"errors": [f"no session {key}"]}


def test_a_session_without_external_id_has_a_url_of_its_own(tokens, questions, client):
    first = post(client, session(external_id=None)).json()
    assert first["session"] is None
    assert first["summary_url"] == f"/studyqueue/api/sessions-by-id/{first['id']}/summary"
    assert client.get(first["summary_url"], **AUTH).json()["id"] == first["id"]
    # Without an external id nothing tells a resend from a new session.
    assert post(client, session(external_id=None)).status_code == 201
    # An external id made of the same digits has its own URL; each names its own session.
    named = post(client, session(external_id=str(first["id"]), learner="lee")).json()
    assert named["summary_url"] == f"{URL}/{first['id']}/summary"
    assert client.get(first["summary_url"], **AUTH).json()["learner"] == "kim-07"
    assert client.get(named["summary_url"], **AUTH).json()["learner"] == "lee"
    for missing in (f"{URL}/{first['id'] + 9}/summary", f"{URL}-by-id/{'9' * 30}/summary"):
        assert client.get(missing, **AUTH).status_code == 404


@pytest.mark.parametrize("external_id", ["..", ".", "a/../b", "a/./b", "a//b", "/a", "a/"])
def test_an_external_id_its_url_cannot_carry_is_refused(tokens, questions, client, external_id):
    response = post(client, session(external_id=external_id))
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith("external_id is part of a URL")


def test_a_resend_after_a_question_was_deleted_is_the_recorded_session(tokens, questions, client):
    first = post(client, session())
    StudyQuestion.objects.filter(external_id="geo-2").delete()
    again = post(client, session())
    assert (again.status_code, again.json()) == (200, first.json())
    assert StudySession.objects.count() == 1 and len(summary_jobs()) == 1


def test_korean_is_sent_as_is(tokens, questions, client):
    post(client, session())
    summary = SessionSummary.objects.create(session=StudySession.objects.get(), text="점수: 1/2")
    with transaction.atomic():
        summaries.make_current(summary)
    response = client.get(f"{URL}/s-104/summary", **AUTH)
    assert response["Content-Type"] == "application/json"
    assert '"text": "점수: 1/2"'.encode() in response.content
    refused = post(client, session(set="기말"))
    assert "\"no question set named '기말'\"".encode() in refused.content


def test_an_external_id_with_a_slash_has_a_summary_url(tokens, questions, client):
    created = post(client, session(external_id="app/s 1")).json()
    assert created["summary_url"] == f"{URL}/app/s%201/summary"
    assert client.get(created["summary_url"], **AUTH).json()["session"] == "app/s 1"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_posts_of_one_new_session_record_it_once(tokens, questions):
    start = threading.Barrier(2)
    statuses: list[int] = []

    def send() -> None:
        try:
            client = Client()
            start.wait(10)
            statuses.append(post(client, session()).status_code)
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200, 201]
    assert StudySession.objects.count() == 1
    assert len(summary_jobs()) == 1
