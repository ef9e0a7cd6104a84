"""``explain --prompt-template``: a trial template that does not compile, fails while
rendering, or renders nothing, is a one-line error naming it; nothing is sent and no job is
made or touched; a trial's reply is checked like any."""

from __future__ import annotations

import subprocess
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from studyqueue.explanations.quality import QualityFlag
from studyqueue.models import ExplanationRevision, JobAttempt, JobKind, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

NOT_COMPILING = {
    # A path relative to the trial's own, which has none among the template folders.
    "relative_include": ('{% include "../../etc/hostname" %}', "the relative path ../../etc"),
    "relative_extends": ("{% extends './base.txt' %}", "the relative path ./base.txt"),
    "syntax": ("{% if %}", "TemplateSyntaxError: Unexpected end of expression"),
    # Django's message lists the libraries it knows, one a line.
    "unknown_library": ("{% load no_such_library %}", "TemplateSyntaxError: 'no_such_library'"),
}
FAILING = {
    "missing_include": ('{% include "studyqueue/no_such_part.txt" %}', "TemplateDoesNotExist"),
    # Outside the template folders: the loaders refuse it as they would a missing one.
    "absolute_include": ('{% include "/etc/hostname" %}', "TemplateDoesNotExist"),
    "escaping_include": (
        '{% include "studyqueue/../../../../etc/hostname" %}',
        "TemplateDoesNotExist",
    ),
    # A tag whose rendering needs what a prompt's context lacks (the admin's log).
    "admin_log": ("{% load log %}{% get_admin_log 10 as log for_user user %}", "KeyError"),
}
EMPTY = {
    "blank": "  \n\t\n",
    "comment": "{# only a comment #}",
    "false_branch": "{% if question.text == 'never' %}{{ question.text }}{% endif %}",
}


def nothing_made() -> bool:
    """No job, attempt or revision: a trial stores nothing, even when it fails."""
    models = (StudyQuestionJob, JobAttempt, ExplanationRevision)
    return not any(model.objects.exists() for model in models)


@pytest.mark.parametrize("dry_run", [False, True], ids=["call", "dry_run"])
@pytest.mark.parametrize("name", sorted(NOT_COMPILING))
def test_a_trial_that_does_not_compile_is_one_error_and_nothing_is_sent(
    llm_server, tmp_path, name, dry_run
):
    source, reason = NOT_COMPILING[name]
    trial = tmp_path / "trial.txt"
    trial.write_text(source, encoding="utf-8")
    question = StudyQuestionFactory()
    args = ["explain", str(question.pk), "--prompt-template", str(trial)]
    with pytest.raises(CommandError) as raised:
        call_command(*args, *(["--dry-run"] if dry_run else []))
    message = str(raised.value)
    assert message.startswith(f"{trial} is not a valid template: {reason}"), message
    assert "\n" not in message
    assert llm_server.stats()["requests"] == 0 and nothing_made()


def test_a_failing_trial_leaves_the_questions_queued_job_as_it_was(llm_server, tmp_path):
    """A job a consumer is to run is neither claimed nor touched by a trial that fails."""
    question = StudyQuestionFactory()
    job = enqueue(question, JobKind.EXPLANATION).job
    before = StudyQuestionJob.objects.values().get(pk=job.pk)
    trial = tmp_path / "trial.txt"
    for source in ('{% include "../../etc/hostname" %}', '{% include "/etc/hostname" %}'):
        trial.write_text(source, encoding="utf-8")
        with pytest.raises(CommandError):
            call_command("explain", str(question.pk), "--prompt-template", str(trial))
    assert list(StudyQuestionJob.objects.values()) == [before]
    assert not JobAttempt.objects.exists() and not ExplanationRevision.objects.exists()
    assert llm_server.stats()["requests"] == 0


@pytest.mark.parametrize("dry_run", [False, True], ids=["call", "dry_run"])
@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_trial_that_fails_while_rendering_is_one_error_and_nothing_is_sent(
    llm_server, tmp_path, name, dry_run
):
    source, error = FAILING[name]
    trial = tmp_path / "trial.txt"
    trial.write_text(source, encoding="utf-8")
    question = StudyQuestionFactory()
    args = ["explain", str(question.pk), "--prompt-template", str(trial)]
    with pytest.raises(CommandError) as raised:
        call_command(*args, *(["--dry-run"] if dry_run else []))
    message = str(raised.value)
    assert message.startswith(f"{trial} failed while rendering question {question.pk}: {error}")
    assert message.endswith("; nothing sent") and "\n" not in message
    assert llm_server.stats()["requests"] == 0 and llm_server.bodies == []
    assert nothing_made()


@pytest.mark.parametrize("dry_run", [False, True], ids=["call", "dry_run"])
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_a_trial_that_renders_empty_is_an_error_and_nothing_is_sent(
    llm_server, tmp_path, name, dry_run
):
    trial = tmp_path / "trial.txt"
    trial.write_text(EMPTY[name], encoding="utf-8")
    question = StudyQuestionFactory()
    args = ["explain", str(question.pk), "--prompt-template", str(trial)]
    with pytest.raises(CommandError, match="renders an empty user message"):
        call_command(*args, *(["--dry-run"] if dry_run else []))
    assert llm_server.stats()["requests"] == 0 and llm_server.bodies == []


@pytest.mark.slow
def test_the_command_prints_one_translated_line_and_exits_non_zero(
    llm_server, tmp_path, child_env, python
):
    """As an operator runs it: no traceback, one line in the operator's language."""
    trial = tmp_path / "trial.txt"
    trial.write_text('{% include "studyqueue/no_such_part.txt" %}', encoding="utf-8")
    question = StudyQuestionFactory()
    done = subprocess.run(
        [python, "manage.py", "explain", str(question.pk), "--prompt-template", str(trial)],
        cwd=ROOT,
        env={**child_env, "STUDYQUEUE_LLM_URL": llm_server.url, "LANGUAGE_CODE": "ko"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "TemplateDoesNotExist" in lines[0] and "Traceback" not in done.stderr
    assert "렌더링" in lines[0], lines[0]  # the Korean catalogue's line
    assert llm_server.stats()["requests"] == 0


@pytest.mark.slow
def test_an_include_outside_the_template_folders_is_one_line_not_a_traceback(
    llm_server, tmp_path, child_env, python
):
    trial = tmp_path / "trial.txt"
    trial.write_text('{% include "../../etc/hostname" %}', encoding="utf-8")
    question = StudyQuestionFactory()
    done = subprocess.run(
        [python, "manage.py", "explain", str(question.pk), "--prompt-template", str(trial)],
        cwd=ROOT,
        env={**child_env, "STUDYQUEUE_LLM_URL": llm_server.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{trial} is not a valid template: the relative path ../../etc/hostname" in line
    assert llm_server.stats()["requests"] == 0 and nothing_made()


def test_a_trial_reply_is_checked_against_the_key_like_any_reply(llm_server, tmp_path):
    question = StudyQuestionFactory(
        text="Which city is the capital of South Korea?", choices=["Busan", "Seoul"], answer="2"
    )
    llm_server.configure(answer="Busan is the largest port and the capital.\nAnswer: 1")
    trial = tmp_path / "trial.txt"
    trial.write_text("{{ question.text }}", encoding="utf-8")
    out = StringIO()
    call_command("explain", str(question.pk), "--prompt-template", str(trial), stdout=out)
    assert str(QualityFlag.ANSWER_MISMATCH.label) in out.getvalue()
