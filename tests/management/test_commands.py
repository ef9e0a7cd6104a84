"""The management commands, run in-process with call_command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from studyqueue.models import StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --------------------------------------------------------------------------- runconsumer


def test_runconsumer_once_runs_one_cycle(llm_server):
    for q in StudyQuestionFactory.create_batch(2):
        enqueue(q)
    out = run("runconsumer", "--once", "--worker-id", "cli")
    assert out.startswith("cycle 1: claimed=2 completed=2")
    assert "cycle 2" not in out
    assert set(StudyQuestionJob.objects.values_list("status", "worker_id")) == {
        ("completed", "cli")
    }


def test_runconsumer_drain_runs_cycles_until_nothing_is_ready(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "CYCLE_BUDGET_SECONDS": 0.0}
    for q in StudyQuestionFactory.create_batch(3):
        enqueue(q)
    out = run("runconsumer", "--drain")
    assert out.count("cycle ") == 3
    assert StudyQuestionJob.objects.filter(status="completed").count() == 3


def test_runconsumer_drain_with_nothing_to_do(llm_server):
    assert run("runconsumer", "--drain").startswith("cycle 1: claimed=0")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--batch-size", "0"], "must be at least 1"),
        (["--batch-size", "two"], "expected a whole number"),
        (["--interval", "-5"], "must be greater than 0"),
        (["--worker-id", " "], "must not be empty"),
        (["--worker-id", "w" * 201], "must be at most 200 characters"),
        (["--interval", "inf"], "must be a finite number"),
        (["--interval", "nan"], "must be a finite number"),
        (["--interval", "1e10"], "must be at most 86400"),
        (["--batch-size", "99999999999999999999"], "must be at most 1000,"),
        (["--once", "--drain"], "not allowed with argument"),
        (["--once", "--interval", "5"], "cannot go with --once/--drain"),
    ],
)
def test_runconsumer_rejects_bad_options(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("runconsumer", *args)


# --------------------------------------------------------------------------- resetstale


def test_resetstale_dry_run_changes_nothing_then_resets():
    StudyQuestionJobFactory()
    (job,) = transitions.claim(worker_id="dead", limit=1)
    StudyQuestionJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(minutes=30)
    )
    out = run("resetstale", "--dry-run")
    assert out.strip() == (
        "Would reset 1 stale job(s) to pending; 0 would end failed (no heartbeat for 10 min)."
    )
    assert StudyQuestionJob.objects.get().status == "processing"
    assert run("resetstale", "--minutes", "45").startswith("Reset 0 stale job(s)")
    assert run("resetstale").startswith("Reset 1 stale job(s) to pending; 0 ended failed")
    assert StudyQuestionJob.objects.get().status == "pending"


@pytest.mark.parametrize(
    "minutes,message",
    [
        ("0", "must be greater than 0"),
        ("inf", "must be a finite number"),
        ("1e10", "must be at most"),
        ("soon", "expected a number"),
    ],
)
def test_resetstale_rejects_bad_minutes(minutes, message):
    with pytest.raises(CommandError, match=message):
        call_command("resetstale", "--minutes", minutes)


# --------------------------------------------------------------------------- enqueue


def test_enqueue_missing_queues_only_questions_that_need_it():
    fresh = StudyQuestionFactory.create_batch(2)
    StudyQuestionFactory(explanation="already explained")
    StudyQuestionFactory(text="")
    queued = StudyQuestionFactory()
    enqueue(queued)
    assert run("enqueue", "--missing").strip() == "Created 2 explanation job(s); 0 already queued."
    assert set(StudyQuestionJob.objects.values_list("study_question_id", flat=True)) == {
        *(q.pk for q in fresh),
        queued.pk,
    }
    assert run("enqueue", "--missing").strip() == "Created 0 explanation job(s); 0 already queued."


def test_enqueue_questions_by_id_reports_already_queued():
    a, b = StudyQuestionFactory.create_batch(2)
    enqueue(a)
    out = run("enqueue", "--question", str(a.pk), str(b.pk), "--kind", "verification")
    assert out.strip() == "Created 2 verification job(s); 0 already queued."
    out = run("enqueue", "--question", str(a.pk), str(b.pk))
    assert out.strip() == "Created 1 explanation job(s); 1 already queued."


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "give --missing, --outdated or --question"),
        (["--question", "1", "--limit", "5"], "--limit goes with --missing or --outdated"),
        (["--question", "987654"], "no study question with id 987654; nothing queued"),
        (["--missing", "--kind", "poem"], "invalid choice: 'poem'"),
        (["--question", "x"], "expected a whole number"),
        (["--question", "99999999999999999999"], "must be at most 9223372036854775807"),
        (["--question", "0"], "must be at least 1"),
    ],
)
def test_enqueue_rejects_bad_input(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("enqueue", *args)
    assert not StudyQuestionJob.objects.exists()


# --------------------------------------------------------------------------- pause, resume


def test_pausequeue_and_resumequeue():
    from studyqueue.models import QueuePause

    assert run("pausequeue", "--reason", "GPU needed").startswith("Paused for every kind.")
    pause = QueuePause.objects.get()
    assert (pause.kind, pause.reason, pause.paused_by) == (
        "",
        "GPU needed",
        "manage.py pausequeue",
    )
    assert run("pausequeue").startswith("Already paused for every kind since")
    assert run("pausequeue", "--kind", "explanation").startswith("Paused for explanation.")
    assert run("resumequeue").strip() == "Resumed for every kind."
    assert run("resumequeue").strip() == (
        "The queue was not paused for every kind. Still paused: explanation."
    )
    assert run("resumequeue", "--kind", "explanation").strip() == "Resumed for explanation."
    assert not QueuePause.objects.exists()


@pytest.mark.parametrize("command", ["pausequeue", "resumequeue"])
def test_pause_commands_reject_unknown_kinds(command):
    with pytest.raises(CommandError, match="invalid choice: 'poem'"):
        call_command(command, "--kind", "poem")
