"""Study sessions from xAPI statements: ``POST /studyqueue/api/xapi/statements`` (over Django's
test client and a real database), the idle sweep and ``importsessions --format xapi``."""

from __future__ import annotations

import base64
import http.client
import json
import threading
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import Client
from django.utils import timezone
from ralph.models.xapi.base.statements import BaseXapiStatement

from studyqueue.models import JobKind, StudyQuestionJob, StudySession, XapiStatement
from studyqueue.sessions import xapi
from tests.factories import StudyQuestionFactory
from tests.helpers import wait_for
from tests.helpers.processes import api_under_gunicorn

pytestmark = pytest.mark.django_db

URL = "/studyqueue/api/xapi/statements"
TOKEN = "tok-en-2"
REGISTRATION = "6b2c1f0a-3b4c-4d5e-8f90-a1b2c3d4e5f6"
HEADERS = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}", "HTTP_X_EXPERIENCE_API_VERSION": "1.0.3"}
ACTOR = {"objectType": "Agent", "account": {"homePage": "https://app.example", "name": "kim-07"}}
CHOICES = [
    {"id": "busan", "description": {"ko": "부산"}},
    {"id": "seoul", "description": {"ko": "서울"}},
]


@pytest.fixture(autouse=True)
def setup(settings) -> None:
    settings.STUDYQUEUE = {"API_TOKENS": f"tok-en-1, {TOKEN}", "SESSION_IDLE_MINUTES": 30}
    StudyQuestionFactory(external_id="geo-1", choices=["부산", "서울"], answer="서울")
    StudyQuestionFactory(external_id="geo-2", choices=["동해", "서해"], answer="동해")
    StudyQuestionFactory(external_id="수도-3", text="프랑스의 수도는?", answer="파리")


def statement(verb: str = "answered", minute: int = 0, **changes: Any) -> dict[str, Any]:
    """A statement as an xAPI client sends it: an answer to geo-1 by default."""
    body: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "actor": ACTOR,
        "verb": {"id": f"http://adlnet.gov/expapi/verbs/{verb}", "display": {"ko": verb}},
        "object": {
            "objectType": "Activity",
            "id": "https://app.example/questions/geo-1",
            "definition": {"interactionType": "choice", "choices": CHOICES},
        },
        "context": {"registration": REGISTRATION},
        "timestamp": f"2026-12-01T09:{minute:02d}:00+09:00",
    }
    if verb == "answered":
        body["result"] = {"response": "seoul", "success": True, "duration": "PT31S"}
    return {**body, **changes}


def batch() -> list[dict[str, Any]]:
    """An app's session: geo-1 by a choice id, geo-2 by number, 수도-3 by text, then completed."""
    return [
        statement(minute=1),
        statement(
            minute=3,
            object={"id": "https://app.example/questions/geo-2"},
            result={"response": "2", "duration": "PT1M4.6S"},
        ),
        statement(
            minute=4,
            object={"id": "https://app.example/questions/%EC%88%98%EB%8F%84-3?lang=ko"},
            result={"response": "파리"},
        ),
        statement("completed", minute=5),
    ]


def post(body: object, client: Client | None = None, **headers: str):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return (client or Client()).post(URL, data, "application/json", **{**HEADERS, **headers})


def test_the_statements_the_tests_send_are_valid_xapi():
    """The oracle: ralph's xAPI statement model accepts each one."""
    for sent in [*batch(), statement("terminated")]:
        BaseXapiStatement(**sent)


def test_a_batch_ending_in_completed_is_one_session_with_its_summary_job():
    sent = batch()
    response = post(sent)
    assert response.status_code == 200, response.content
    assert response.json() == [s["id"] for s in sent]
    assert response["X-Experience-API-Version"].startswith("1.0")
    session = StudySession.objects.get()
    assert (session.external_id, session.learner, session.right, session.total) == (
        REGISTRATION,
        "kim-07",
        2,
        3,
    )
    assert (session.ended_at - session.started_at) == timedelta(minutes=4)
    assert list(session.answers.values_list("question__external_id", "chosen", "seconds")) == [
        ("geo-1", "2", 31),
        ("geo-2", "2", 65),
        ("수도-3", "파리", None),
    ]
    jobs = StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY, study_session=session)
    assert jobs.count() == 1
    assert set(session.statements.values_list("statement_id", flat=True)) == {
        uuid.UUID(s["id"]) for s in sent
    }


def test_the_same_batch_again_changes_nothing_and_a_changed_one_is_a_conflict():
    sent = batch()
    assert post(sent).status_code == 200
    again = post(sent)
    assert (again.status_code, again.json()) == (200, [s["id"] for s in sent])
    assert (StudySession.objects.count(), XapiStatement.objects.count()) == (1, 4)
    changed = [*sent[:1], {**sent[1], "result": {"response": "1"}}]
    conflict = post(changed)
    assert conflict.status_code == 409
    assert sent[1]["id"] in conflict.json()["errors"][0]
    assert XapiStatement.objects.count() == 4
    twice = statement(context={"registration": str(uuid.uuid4())})
    assert post([twice, twice]).json() == [twice["id"], twice["id"]]
    assert post([twice, {**twice, "timestamp": "2026-12-02T09:00:00Z"}]).status_code == 409
    assert XapiStatement.objects.count() == 5


def test_statements_arrive_over_several_posts_and_a_late_one_gets_a_reason():
    first, *rest = batch()
    assert post(first).status_code == 200
    assert not StudySession.objects.exists()  # open until it completes or goes idle
    assert post(rest).status_code == 200
    assert StudySession.objects.get().total == 3
    late = post(statement(minute=9))
    assert late.status_code == 400
    assert late.json()["errors"] == [
        f"registration {REGISTRATION} is complete: its session was recorded"
    ]


def test_a_registration_goes_idle_and_is_recorded_by_the_sweep():
    assert post(batch()[:3]).status_code == 200
    now = timezone.now()
    assert xapi.close_idle(now + timedelta(minutes=29)) == 0
    assert xapi.close_idle(now + timedelta(minutes=31)) == 1
    assert StudySession.objects.get().total == 3
    assert xapi.close_idle(now + timedelta(minutes=60)) == 0


def test_a_statement_stored_as_the_sweep_recorded_its_session_is_left_as_late(caplog):
    """The request and the sweep raced: the request checked before the sweep committed."""
    assert post(batch()).status_code == 200
    late = statement(minute=9, object={"id": "https://app.example/questions/geo-2"})
    row = xapi._row(late, timezone.now() - timedelta(hours=1))
    assert isinstance(row, XapiStatement)
    row.save()
    assert xapi.close_idle(timezone.now()) == 0
    assert "study_xapi_unrecorded" not in caplog.text
    assert StudySession.objects.get().total == 3


def test_other_verbs_are_accepted_and_ignored():
    experienced = statement("experienced", context={})
    response = post(experienced)
    assert (response.status_code, response.json()) == (200, [experienced["id"]])
    assert xapi.close_idle(timezone.now() + timedelta(days=1)) == 0
    assert not StudySession.objects.exists()


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        (statement(context={}), "statement 1: context.registration"),
        (statement(id="not-a-uuid"), "statement 1: id is not a UUID"),
        (statement(timestamp="yesterday"), "statement 1: timestamp is not a date"),
        (statement(timestamp="0001-01-01T00:00:00+09:00"), "statement 1: timestamp is not"),
        ({**statement(), "verb": {"id": [1]}}, "statement 1: verb.id is missing"),
        ([1], "statement 1: not an object"),
        ([], "no statement"),
        (statement(result={"response": "7"}), "chosen must be a choice number from 1 to 2"),
        (statement(object={"id": "https://x/q/nope"}), 'unknown question "nope"'),
        (statement(actor={"name": "no id"}), "learner is missing"),
        (statement(result={"response": "2", "duration": "soon"}), "seconds must be a whole"),
        (statement(actor={"mbox": "mailto:\ud800@x"}), "statement 1: not valid Unicode"),
        (statement(actor={"mbox": "a\u0000@x"}), "statement 1: not valid Unicode"),
    ],
)
def test_a_bad_statement_is_refused_with_its_reason_and_nothing_is_stored(sent, reason):
    response = post(sent)
    assert response.status_code == 400, response.content
    assert any(reason in error for error in response.json()["errors"]), response.json()
    assert not XapiStatement.objects.exists()


def test_two_learners_in_one_registration_is_a_reason():
    other = statement(minute=2, actor={"mbox": "mailto:lee@example.com"})
    response = post([statement(), other, statement("completed")])
    assert response.status_code == 400
    assert "more than one learner" in response.json()["errors"][0]


def test_the_first_answer_to_a_question_counts():
    wrong_first = statement(result={"response": "busan"})
    response = post([wrong_first, statement(minute=2), statement("terminated", minute=3)])
    assert response.status_code == 200
    assert StudySession.objects.get().right == 0


def test_the_token_may_be_the_password_of_http_basic_and_the_version_is_required():
    basic = "Basic " + base64.b64encode(f"lrs-client:{TOKEN}".encode()).decode()
    assert post(batch(), HTTP_AUTHORIZATION=basic).status_code == 200
    wrong = "Basic " + base64.b64encode(b"lrs-client:wrong").decode()
    refused = post(batch(), HTTP_AUTHORIZATION=wrong)
    assert refused.status_code == 401
    assert "Basic" in refused["WWW-Authenticate"]
    assert post(batch(), HTTP_AUTHORIZATION="Basic %%%").status_code == 401
    for version in ("", "0.95", "1.1.0", "2.0.0x"):
        response = post(batch(), HTTP_X_EXPERIENCE_API_VERSION=version)
        assert response.status_code == 400
        assert response.json()["errors"] == ["X-Experience-API-Version must be 1.0.x or 2.0.x"]
    other = statement(context={"registration": str(uuid.uuid4())})
    assert post(other, HTTP_X_EXPERIENCE_API_VERSION="2.0.0").status_code == 200


def importsessions(tmp_path, text: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "statements.json"
    path.write_text(text, encoding="utf-8")
    out = StringIO()
    call_command("importsessions", str(path), "--format", "xapi", stdout=out)
    return out.getvalue()


def test_importsessions_reads_an_lrs_export_as_an_array_or_json_lines(tmp_path):
    sent = batch()
    out = importsessions(tmp_path, json.dumps(sent[:3], ensure_ascii=False))
    # No completed statement, but its last statement is days old: recorded as idle.
    assert out.strip() == "Read 3 statement(s); recorded 1 session(s)."
    assert StudySession.objects.get().total == 3
    lines = "\n".join(json.dumps(s) for s in sent[:3])
    assert importsessions(tmp_path, lines).strip() == "Read 3 statement(s); recorded 0 session(s)."
    with pytest.raises(CommandError, match="is complete: its session was recorded"):
        importsessions(tmp_path, json.dumps(sent))
    assert StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY).count() == 1


def test_importsessions_refuses_a_bad_file_whole(tmp_path):
    with pytest.raises(CommandError, match="line 2"):
        importsessions(tmp_path, json.dumps(statement()) + "\n{not json")
    with pytest.raises(CommandError, match="statement 2: id is not a UUID"):
        importsessions(tmp_path, json.dumps([statement(), statement(id=7)]))
    with pytest.raises(CommandError, match="recorded whole"):
        call_command("importsessions", "-", "--format", "xapi", "--skip-invalid")
    assert not XapiStatement.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_posts_of_one_batch_store_it_once():
    """A client's retry while its first request is still being stored: both answer 200."""
    start = threading.Barrier(2)
    sent, statuses = batch(), []

    def send() -> None:
        try:
            start.wait(10)
            statuses.append(post(sent).status_code)
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [200, 200]
    assert (StudySession.objects.count(), XapiStatement.objects.count()) == (1, 4)
    assert StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY).count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_xapi_client_through_gunicorn(child_env, python, free_port):
    """As an LRS client sends them: HTTP Basic, the version header, a batch; then the session's
    summary URL answers with the session."""
    bind = f"127.0.0.1:{free_port}"
    basic = "Basic " + base64.b64encode(f"lrs:{TOKEN}".encode()).decode()

    def send(method: str, path: str, body: object = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(bind, timeout=30)
        headers = {"Authorization": basic, "X-Experience-API-Version": "1.0.3"}
        try:
            data = None if body is None else json.dumps(body).encode()
            connection.request(method, path, data, {**headers, "Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null")
        except OSError:
            return 0, None  # not listening yet
        finally:
            connection.close()

    with api_under_gunicorn(python, child_env, bind, TOKEN):
        wait_for(lambda: send("POST", URL, [])[0] == 400, what="gunicorn")
        sent = batch()
        assert send("POST", URL, sent) == (200, [s["id"] for s in sent])
        status, summary = send("GET", f"/studyqueue/api/sessions/{REGISTRATION}/summary")
    assert status == 200
    assert (summary["learner"], summary["right"], summary["total"]) == ("kim-07", 2, 3)
    assert summary["status"] in ("waiting", "queued")
