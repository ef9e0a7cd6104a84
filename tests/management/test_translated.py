"""The commands speak the operator's language: their output, their errors and their help go
through gettext. Run in Korean against a pseudo-Korean catalogue (every string the app marks,
"translated" behind a marker), each line a command writes carries the marker: a line without
it was never marked. The shipped Korean catalogue is checked by tests/test_locale.py."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.core.management.base import BaseCommand
from django.utils import translation

from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers import catalogue
from tests.helpers.catalogue import MARK

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(shutil.which("xgettext") is None, reason="needs GNU gettext (xgettext)"),
]


@pytest.fixture(scope="module")
def pseudo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return catalogue.pseudo_locale(tmp_path_factory.mktemp("catalogue"))


@pytest.fixture
def korean(pseudo: Path, settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    settings.LOCALE_PATHS = [str(pseudo)]  # ahead of the app's own catalogue
    with translation.override("ko"):
        yield


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def unmarked(text: str) -> list[str]:
    """The lines of ``text`` that do not start with a marked string (a marked value inside
    an unmarked sentence does not count)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines, "the command wrote nothing"
    return [line for line in lines if not line.startswith(MARK)]


def test_what_the_commands_write_is_marked(korean, tmp_path):
    question = StudyQuestionFactory()
    StudyQuestionJobFactory(status="failed")
    source = tmp_path / "questions.jsonl"
    source.write_text('{"text": "1 + 1?", "answer": "2"}\n', encoding="utf-8")
    written: list[str] = []
    for args in (
        ["enqueue", "--question", str(question.pk)],
        ["pausequeue", "--reason", "점검"],
        ["pausequeue"],  # already paused: since when, by whom
        ["resumequeue"],
        ["resumequeue", "--kind", "explanation"],  # not paused
        ["resetstale", "--dry-run"],
        ["resetstale"],
        ["retryjobs", "--dry-run"],
        ["retryjobs"],
        ["skipjobs", "--dry-run"],
        ["importquestions", str(source), "--enqueue"],
        ["exportexplanations", "--output", str(tmp_path / "out.jsonl")],
    ):
        out, err = run(*args)
        written += [f"{args[0]}: {line}" for line in unmarked(out + err)]
    # explain --dry-run: its first line; the messages after it are the prompt, not ours.
    first = run("explain", str(question.pk), "--dry-run")[0].splitlines()[0]
    written += unmarked(first)
    assert not written, written


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue"],
        ["enqueue", "--question", "1", "--limit", "3"],
        ["enqueue", "--missing", "--include-approved"],
        ["enqueue", "--question", "999999"],
        ["enqueue", "--missing", "--limit", "0"],  # argparse: the type's own message
        ["enqueue", "--missing", "--limit", "many"],
        ["explain", "999999"],
        ["runconsumer", "--once", "--interval", "5"],
        ["runconsumer", "--interval", "-1"],
        ["runconsumer", "--worker-id", " "],
        ["importquestions", "/nonexistent/questions.jsonl"],
        ["exportexplanations", "--output", "/nonexistent/dir/out.jsonl"],
    ],
)
def test_command_errors_are_marked(korean, args):
    with pytest.raises(CommandError) as raised:
        run(*args)
    # argparse's own words ("Error: argument --limit:") come first for a bad value.
    message = re.sub(r"^Error: argument [^:]+: ", "", str(raised.value))
    assert message.startswith(MARK), str(raised.value)


def _studyqueue_commands() -> list[str]:
    return sorted(name for name, app in get_commands().items() if app == "studyqueue")


@pytest.mark.parametrize("name", _studyqueue_commands())
def test_command_help_is_marked(korean, name):
    command = load_command_class("studyqueue", name)
    parser = command.create_parser("manage.py", name)
    # argparse lists a parser's options only in ``_actions``; Django's own options
    # (--verbosity, --settings...) are not ours to mark.
    django_options = {a.dest for a in BaseCommand().create_parser("manage.py", name)._actions}
    assert parser.description and parser.description.startswith(MARK), parser.description
    helps = {a.dest: a.help for a in parser._actions if a.dest not in django_options and a.help}
    assert not [dest for dest, text in helps.items() if not text.startswith(MARK)], helps
