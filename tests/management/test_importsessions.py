"""importsessions: study sessions from JSON Lines, checked whole before any is recorded."""

from __future__ import annotations

import json
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from studyqueue.models import (
    JobKind,
    SessionAnswer,
    StudyQuestion,
    StudyQuestionJob,
    StudySession,
)
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def questions() -> None:
    StudyQuestionFactory(external_id="geo-1", choices=["Seoul", "Busan", "Incheon"], answer="Seoul")
    StudyQuestionFactory(external_id="geo-2", text="Capital of France?", answer="Paris")
    StudyQuestionFactory(
        external_id="geo-3", choices=["A", "B"], answer="B", explanation="B, because."
    )


def session(external_id: str = "s-1", **changes: Any) -> dict[str, Any]:
    record = {
        "external_id": external_id,
        "learner": "kim-07",
        "started_at": "2026-12-01T09:00:00+09:00",
        "ended_at": "2026-12-01T09:25:00+09:00",
        "answers": [
            {"question": "geo-1", "chosen": 2, "seconds": 31},
            {"question": "geo-2", "chosen": "Paris"},
            {"question": "geo-3", "chosen": 1},
        ],
    }
    return {**record, **changes}


def jsonl(tmp_path, *records: dict[str, Any] | str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "sessions.jsonl"
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records), encoding="utf-8"
    )
    return str(path)


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("importsessions", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_good_file_records_each_session_scored_against_the_keys(tmp_path):
    out, err = run(jsonl(tmp_path, session("s-1"), "", session("s-2", learner="lee-02")))
    assert out.strip() == "Recorded 2 session(s), 0 already recorded, 0 skipped."
    assert "recorded 2/2 sessions" in err  # the progress line off a terminal
    first = StudySession.objects.get(external_id="s-1")
    assert (first.learner, first.right, first.total) == ("kim-07", 1, 3)
    assert list(
        SessionAnswer.objects.filter(session=first).values_list("chosen", "correct", "seconds")
    ) == [("2", False, 31), ("Paris", True, None), ("1", False, None)]
    assert not StudyQuestionJob.objects.exists()  # no --enqueue: nothing queued


def test_standard_input(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", StringIO(json.dumps(session()) + "\n"))
    assert run("-")[0].startswith("Recorded 1 session(s)")


@pytest.mark.parametrize(
    "bad,reason",
    [
        (session(answers=[{"question": "geo-9", "chosen": 1}]), 'unknown question "geo-9"'),
        (
            session(answers=[{"question": "geo-1", "chosen": 4}]),
            "chosen must be a choice number from 1 to 3",
        ),
        (
            session(answers=[{"question": "geo-2", "chosen": "x"}] * 2),
            "question geo-2 is answered twice",
        ),
        (session(ended_at="2026-12-01T08:00:00+09:00"), "ended_at is before started_at"),
        ({k: v for k, v in session().items() if k != "learner"}, "learner is missing"),
        ('{"external_id": "s-2", "learner": ', "not JSON"),
        ("[1, 2]", "a session must be a JSON object"),
    ],
)
def test_a_bad_line_is_named_with_its_reason_and_nothing_is_recorded(tmp_path, bad, reason):
    with pytest.raises(CommandError) as raised:
        run(jsonl(tmp_path, session("s-1"), bad, session("s-3")))
    message = str(raised.value)
    assert message.startswith("1 invalid line(s); nothing recorded")
    assert "--skip-invalid records the 2 valid ones" in message
    assert "line 2: " in message and reason in message, message
    assert not StudySession.objects.exists()


def test_every_bad_line_is_named_with_every_reason(tmp_path):
    bad = session(learner="", ended_at="2026-12-01T08:00:00+09:00")
    with pytest.raises(CommandError) as raised:
        run(jsonl(tmp_path, bad, session("s-2"), "not json"))
    message = str(raised.value)
    assert "line 1: learner is missing; ended_at is before started_at" in message
    assert "line 3: not JSON" in message


def test_skip_invalid_records_the_good_lines_and_names_the_bad(tmp_path):
    bad = session("s-2", answers=[{"question": "geo-9", "chosen": 1}])
    out, err = run(jsonl(tmp_path, session("s-1"), bad, session("s-3")), "--skip-invalid")
    assert out.strip() == "Recorded 2 session(s), 0 already recorded, 1 skipped."
    assert "skipped 1 invalid line(s):\n  line 2: answer 1: unknown question" in err
    assert set(StudySession.objects.values_list("external_id", flat=True)) == {"s-1", "s-3"}


def test_skip_invalid_gives_a_reason_for_any_json_value(tmp_path):
    odd = [
        session("s-2", answers=[{"question": {"id": [1]}, "chosen": 1}]),
        session("s-3", answers=[{"question": {"id": 10**30}, "chosen": 1}]),
        '{"external_id": "s-4", "learner": "kim", "answers": [{"question": "\\ud800"}]}',
        session("s-5", started_at="0001-01-01T00:00:00+09:00"),
    ]
    out, err = run(jsonl(tmp_path, session("s-1"), *odd), "--skip-invalid")
    assert out.strip() == "Recorded 1 session(s), 0 already recorded, 4 skipped."
    assert 'line 2: answer 1: unknown question {"id": [1]}' in err
    assert f'line 3: answer 1: unknown question {{"id": {10**30}}}' in err
    assert (
        'line 4: started_at is missing; ended_at is missing; answer 1: unknown question "\\ud800"'
        in err
    )
    assert "line 5: started_at is not a date and time like" in err


def test_a_reimport_after_a_question_was_deleted_knows_its_sessions(tmp_path):
    path = jsonl(tmp_path, session("s-1"), session("s-2"))
    run(path, "--enqueue")
    StudyQuestion.objects.filter(external_id="geo-3").delete()
    out, _ = run(path, "--enqueue")
    assert out.strip() == (
        "Recorded 0 session(s), 2 already recorded, 0 skipped; queued 0 summary job(s)."
    )


def test_a_reimport_knows_its_sessions_again(tmp_path):
    path = jsonl(tmp_path, session("s-1"), session("s-2"))
    run(path)
    out, _ = run(path, "--enqueue")
    assert out.strip() == (
        "Recorded 0 session(s), 2 already recorded, 0 skipped; queued 0 summary job(s)."
    )
    assert StudySession.objects.count() == 2
    assert not StudyQuestionJob.objects.exists()  # nothing created, nothing queued


def test_the_same_session_twice_in_a_file_is_recorded_once(tmp_path):
    out, _ = run(jsonl(tmp_path, session("s-1"), session("s-1")))
    assert out.strip() == "Recorded 1 session(s), 1 already recorded, 0 skipped."


def test_a_known_id_with_other_content_is_a_bad_line(tmp_path):
    run(jsonl(tmp_path, session("s-1")))
    other = session("s-1", learner="lee-02")
    with pytest.raises(CommandError, match="line 2: session s-1 was recorded before with other"):
        run(jsonl(tmp_path, session("s-2"), other))
    # Found while recording: what was recorded before it in the file is undone too.
    assert list(StudySession.objects.values_list("external_id", flat=True)) == ["s-1"]
    out, err = run(jsonl(tmp_path, session("s-2"), other), "--skip-invalid")
    assert out.strip() == "Recorded 1 session(s), 0 already recorded, 1 skipped."
    assert "line 2: session s-1 was recorded before" in err
    assert StudySession.objects.get(external_id="s-1").learner == "kim-07"


def test_enqueue_queues_a_summary_for_each_new_session_and_the_explanations_it_needs(tmp_path):
    right = session("s-2", answers=[{"question": "geo-2", "chosen": "Paris"}])
    out, _ = run(jsonl(tmp_path, session("s-1"), right), "--enqueue")
    assert out.strip() == (
        "Recorded 2 session(s), 0 already recorded, 0 skipped; queued 2 summary job(s)."
    )
    jobs = StudyQuestionJob.objects.all()
    summaries = jobs.filter(kind=JobKind.SESSION_SUMMARY)
    assert set(summaries.values_list("study_session__external_id", flat=True)) == {"s-1", "s-2"}
    # geo-1 was missed and has no explanation; geo-3 was missed but is explained.
    explanations = jobs.filter(kind=JobKind.EXPLANATION)
    assert list(explanations.values_list("study_question__external_id", flat=True)) == ["geo-1"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["/nonexistent/sessions.jsonl"], "cannot read /nonexistent/sessions.jsonl"),
        ([], "the following arguments are required: file"),
    ],
)
def test_bad_arguments_give_a_clear_error(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
