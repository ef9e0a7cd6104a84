"""Questions in, explanations out: importquestions and exportexplanations, and the admin's
CSV download; from a CSV of questions to a CSV of explanations in three commands."""

from __future__ import annotations

import csv
import io
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from studyqueue.models import StudyQuestion, StudyQuestionJob

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def jsonl(tmp_path, *records) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records))
    return str(path)


def test_jsonl_import_creates_then_a_reimport_updates_instead_of_duplicating(tmp_path):
    first = jsonl(
        tmp_path,
        {"text": "What is 2 + 2?", "choices": ["3", "4"], "answer": "4", "external_id": "q1"},
        {"text": "Capital of France?", "external_id": "q2"},
        {"text": "No id here"},
    )
    out, _ = run("importquestions", first)
    assert out.strip() == "Imported 3 row(s): 3 created, 0 updated, 0 unchanged."
    again = jsonl(
        tmp_path,
        {"text": "What is 2 + 2?", "choices": ["3", "4"], "answer": "4", "external_id": "q1"},
        {"text": "Capital of France?", "answer": "Paris", "external_id": "q2"},
    )
    out, _ = run("importquestions", again, "--enqueue")
    assert out.strip() == (
        "Imported 2 row(s): 0 created, 1 updated, 1 unchanged; queued 1 explanation job(s)."
    )
    assert StudyQuestion.objects.count() == 3
    assert StudyQuestion.objects.get(external_id="q2").answer == "Paris"
    assert list(StudyQuestionJob.objects.values_list("study_question__external_id", flat=True)) == [
        "q2"
    ]


def test_csv_import_reads_choices_as_pipes_or_json(tmp_path):
    path = tmp_path / "questions.csv"
    path.write_text(
        "external_id,text,choices,answer\n"
        'c1,"Pick one","Paris | Rome | Berlin",Paris\n'
        'c2,"Pick again","[""a, b"", ""c""]",c\n'
    )
    out, _ = run("importquestions", str(path))
    assert out.startswith("Imported 2 row(s): 2 created")
    assert StudyQuestion.objects.get(external_id="c1").choices == ["Paris", "Rome", "Berlin"]
    assert StudyQuestion.objects.get(external_id="c2").choices == ["a, b", "c"]


def test_a_file_with_bad_rows_imports_nothing_and_names_each_bad_row(tmp_path):
    path = jsonl(
        tmp_path,
        {"text": "fine", "external_id": "ok"},
        {"text": ""},
        "{not json",
        {"text": "x", "choices": "Paris"},
        {"text": "x", "choices": ["a", 3]},
        {"text": "x", "colour": "red"},
        {"text": "again", "external_id": "ok"},
        [1, 2],
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    assert message.startswith("7 invalid row(s); nothing imported")
    for expected in (
        "line 2: 'text' is missing or empty",
        "line 3: not JSON",
        "line 4: 'choices': Choices must be a list of strings, not str.",
        "line 5: 'choices': Choice 2 must be a string, not int.",
        "line 6: unknown field(s): colour",
        "line 7: external_id 'ok' also on line 1",
        "line 8: a record must be an object",
    ):
        assert expected in message, expected
    assert not StudyQuestion.objects.exists()
    out, err = run("importquestions", path, "--skip-invalid")
    assert out.startswith("Imported 1 row(s): 1 created")
    assert "skipped 7 invalid row(s)" in err and "line 2:" in err


@pytest.mark.parametrize(
    "args,message",
    [
        (["questions.txt"], "cannot tell the format"),
        (["missing.jsonl"], "cannot read missing.jsonl"),
        (["x.jsonl", "--format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_import_rejects_bad_input(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "questions.txt").write_text("text\nq\n")
    with pytest.raises(CommandError, match=message):
        run("importquestions", *args)


def _explained(**fields) -> StudyQuestion:  # type: ignore[no-untyped-def]
    from django.utils import timezone

    defaults = {"text": "Q?", "explanation": "Because.", "explained_at": timezone.now()}
    return StudyQuestion.objects.create(**{**defaults, **fields})


def test_export_streams_explained_questions_as_jsonl_and_csv(tmp_path):
    from studyqueue.prompts import current_version

    version = current_version().hash
    current = _explained(
        text="Now?", external_id="n", explanation_prompt_version=version, choices=["a", "b"]
    )
    old = _explained(text="Old?", explanation_prompt_version="0123456789ab")
    StudyQuestion.objects.create(text="Never explained")
    out, err = run("exportexplanations")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == [current.pk, old.pk]
    assert rows[0]["external_id"] == "n" and rows[0]["prompt_version"] == version
    assert err.strip() == "exported 2 question(s)"
    out, _ = run("exportexplanations", "--outdated")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [old.pk]
    target = tmp_path / "out.csv"
    _, err = run("exportexplanations", "--format", "csv", "--output", str(target))
    table = list(csv.DictReader(target.open()))
    assert [row["text"] for row in table] == ["Now?", "Old?"]
    assert json.loads(table[0]["choices"]) == ["a", "b"]
    out, _ = run("exportexplanations", "--since", "2999-01-01")
    assert out == ""
    with pytest.raises(CommandError, match="invalid date value"):
        run("exportexplanations", "--since", "yesterday")


def test_the_admin_downloads_the_selection_as_csv(admin_client):
    chosen = _explained(text="Chosen?")
    _explained(text="Other?")
    response = admin_client.post(
        reverse("admin:studyqueue_studyquestion_changelist"),
        {"action": "download_csv", "_selected_action": [chosen.pk]},
    )
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    body = b"".join(response.streaming_content).decode()
    assert [row["text"] for row in csv.DictReader(io.StringIO(body))] == ["Chosen?"]


def test_from_a_csv_of_questions_to_a_csv_of_explanations_in_three_commands(tmp_path, llm_server):
    questions = tmp_path / "questions.csv"
    questions.write_text("external_id,text,choices,answer\nq1,What is 2 + 2?,3 | 4,4\n")
    run("importquestions", str(questions), "--enqueue")
    run("runconsumer", "--drain")
    explanations = tmp_path / "explanations.csv"
    run("exportexplanations", "--format", "csv", "--output", str(explanations))
    (row,) = csv.DictReader(explanations.open())
    assert (row["external_id"], row["explanation"]) == ("q1", "Because 2 + 2 equals 4.")
