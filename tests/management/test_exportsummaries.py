"""exportsummaries: a row per study session with its summary, as JSON Lines or CSV."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from studyqueue.management.commands.exportsummaries import FIELDS
from studyqueue.models import SessionSummary, StudySession
from studyqueue.sessions import recording, summaries
from studyqueue.sets import question_sets
from tests.factories import StudyQuestionFactory
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db


def record(external_id: str, learner: str = "kim-07", chosen: int = 1) -> StudySession:
    return recording.record(
        recording.check(
            {
                "external_id": external_id,
                "learner": learner,
                "started_at": "2026-12-01T09:00:00+09:00",
                "ended_at": "2026-12-01T09:25:00+09:00",
                "answers": [{"question": "q-1", "chosen": chosen}],
            }
        )
    )[0]


@pytest.fixture
def sessions() -> list[StudySession]:
    StudyQuestionFactory(external_id="q-1", choices=["4", "5"], answer="4")
    written = record("s-1")
    summary = SessionSummary.objects.create(
        session=written, text="=HYPERLINK(1/1 맞음)", flags=["no_score_stated"]
    )
    summaries.make_current(summary)
    return [written, record("s-2", learner="=cmd|' /C calc'!A0", chosen=2)]


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("exportsummaries", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_jsonl_to_standard_output_is_each_sessions_json_form(sessions):
    out, err = run()
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [summaries.as_json(StudySession.objects.get(pk=s.pk)) for s in sessions]
    assert rows[0]["status"] == "written" and rows[0]["flags"] == ["no_score_stated"]
    assert (rows[1]["right"], rows[1]["total"], rows[1]["waiting_on"]) == (0, 1, "not_queued")
    assert err.strip() == "exported 2 session(s)"


def test_csv_has_a_bom_and_cells_a_spreadsheet_will_not_run(sessions, tmp_path):
    path = tmp_path / "summaries.csv"
    run("--format", "csv", "--output", str(path))
    text = path.read_text(encoding="utf-8")
    assert text.startswith("\ufeff")
    rows = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"))))
    assert tuple(rows[0]) == FIELDS
    assert rows[0]["text"] == "'=HYPERLINK(1/1 맞음)"
    assert rows[0]["flags"] == '["no_score_stated"]'
    assert rows[1]["learner"] == "'=cmd|' /C calc'!A0"
    assert (rows[1]["session"], rows[1]["right"], rows[1]["written_at"]) == ("s-2", "0", "")


def test_the_columns_are_the_json_forms_keys(sessions):
    assert tuple(summaries.as_json(sessions[0])) == FIELDS


def test_learner_and_set_filters(sessions):
    out, _ = run("--learner", "kim-07")
    assert [json.loads(line)["session"] for line in out.splitlines()] == ["s-1"]
    question_sets.add("week 1", [])
    StudySession.objects.filter(pk=sessions[1].pk).update(question_set=question_sets.get("week 1"))
    out, _ = run("--set", "week 1")
    assert [json.loads(line)["session"] for line in out.splitlines()] == ["s-2"]


def test_a_few_queries_per_row_whatever_the_count(sessions, django_assert_max_num_queries):
    for n in range(20):
        record(f"more-{n}")
    with django_assert_max_num_queries(2 * 22 + 3):
        run("--format", "csv")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--format", "xml"], "invalid choice: 'xml'"),
        (["--format", "gift"], "invalid choice: 'gift'"),  # a question format only
        (["--set", "no such set"], "no such set"),
        (["--output", "/nonexistent/dir/out.jsonl"], "cannot write /nonexistent/dir/out.jsonl"),
    ],
)
def test_bad_options_give_a_clear_error(args: list[Any], message: str):
    with pytest.raises(CommandError, match=message):
        run(*args)


@pytest.mark.django_db(transaction=True)
def test_export_into_head_ends_with_one_line_not_a_traceback(child_env, python):
    """``exportsummaries | head -1``: a real pipe its reader closes early. The export stops
    with the one line ``exportexplanations`` gives, not a BrokenPipeError's traceback."""
    now = timezone.now()
    StudySession.objects.bulk_create(
        StudySession(
            external_id=f"s-{n}", learner="k", started_at=now, ended_at=now, right=0, total=0
        )
        for n in range(2000)
    )  # about 700 KB of JSON Lines: more than a pipe holds
    export = subprocess.Popen(
        [python, "manage.py", "exportsummaries"],
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    head = subprocess.run(
        ["head", "-1"], stdin=export.stdout, capture_output=True, text=True, timeout=120
    )
    assert export.stdout is not None
    export.stdout.close()  # only head holds the pipe now
    _, err = export.communicate(timeout=120)
    assert json.loads(head.stdout)["session"] == "s-0"
    assert err.splitlines() == [
        "CommandError: cannot write to standard output: Broken pipe; the export stopped"
    ], err
    assert export.returncode == 1
