"""``explain ID`` in a second shell runs with that shell's settings: a job it created and
could not complete is left for no consumer (which would write it with its own settings),
and it warns where its LLM URL, model or prompt version differ from the live consumers'."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from studyqueue.explanations import outdated
from studyqueue.explanations.prompts import current_version
from studyqueue.models import JobAttempt, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from tests.factories import QueueConsumerFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)


def explain(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("explain", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_refused_llm_url_leaves_no_job_for_a_consumer(
    settings, free_port, llm_server, make_consumer
):
    """The issue as met: ``make run`` serves another URL; explain fails against its own."""
    live_url = llm_server.url
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"http://127.0.0.1:{free_port}/v1"}
    question = StudyQuestionFactory()
    with pytest.raises(CommandError) as raised:
        explain(str(question.pk))
    job = StudyQuestionJob.objects.get()
    assert str(raised.value).startswith(f"job {job.pk} did not complete (llm_unavailable: ")
    assert "not left for a consumer" in str(raised.value)
    assert (job.status, job.error_code, job.attempts) == ("skipped", "llm_unavailable", 0)
    assert transitions.next_due_in() is None
    (attempt,) = JobAttempt.objects.all()
    assert attempt.ended_at is not None and attempt.outcome == "released"
    # The live consumer, on its own URL, finds nothing to write with its settings.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": live_url}
    assert make_consumer().run_cycle().claimed == 0
    question.refresh_from_db()
    assert question.explanation == "" and llm_server.stats()["requests"] == 0


@pytest.mark.parametrize("fault", ["500", "503", "hangup"])
def test_a_failed_call_leaves_no_job_for_a_consumer(llm_server, fault):
    llm_server.configure(fault=fault)
    question = StudyQuestionFactory()
    with pytest.raises(CommandError, match="did not complete"):
        explain(str(question.pk))
    job = StudyQuestionJob.objects.get()
    assert job.status == "skipped" and job.error_code.startswith("llm_")
    assert transitions.next_due_in() is None
    assert llm_server.stats()["requests"] >= 1


def test_a_job_that_was_queued_before_is_handed_back_as_it_was(settings, free_port):
    """Not explain's to withhold: it was waiting for a consumer before explain took it."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_URL": f"http://127.0.0.1:{free_port}/v1"}
    question = StudyQuestionFactory()
    queued = enqueue(question).job
    with pytest.raises(CommandError):
        explain(str(question.pk))
    queued.refresh_from_db()
    assert (queued.status, queued.attempts) == ("pending", 0)


def test_a_completed_explain_is_unchanged(llm_server):
    question = StudyQuestionFactory()
    out, err = explain(str(question.pk))
    job = StudyQuestionJob.objects.get()
    assert job.status == "completed" and "--- job" in out and err == ""


def test_it_warns_where_its_settings_differ_from_the_live_consumers(llm_server):
    version = current_version()
    QueueConsumerFactory(
        llm_url="http://gpu-box:8080/v1",
        model="qwen-14b",
        prompt_version="f" * 12,
        prompt_label="explanation v9",
    )
    question = StudyQuestionFactory()
    _, err = explain(str(question.pk), "--dry-run")
    lines = [line for line in err.splitlines() if line.startswith("Warning: ")]
    assert lines == [
        f"Warning: LLM_URL here is {llm_server.url}; the live consumers use "
        "http://gpu-box:8080/v1. This command calls and writes with the settings here.",
        "Warning: LLM_MODEL here is (the server's default); the live consumers use qwen-14b. "
        "This command calls and writes with the settings here.",
        f"Warning: PROMPT_VERSION here is {version.hash[:7]} ({version.label}); the live "
        "consumers use fffffff (explanation v9). This command calls and writes with the "
        "settings here.",
    ]


def test_no_warning_when_the_live_consumers_write_as_this_shell_would(llm_server):
    version = current_version()
    QueueConsumerFactory(
        llm_url=outdated.shown_urls(),
        model="",
        prompt_version=version.hash,
        prompt_label=version.label,
    )
    QueueConsumerFactory(llm_url="http://elsewhere/v1", stopped_at=timezone.now())  # not live
    question = StudyQuestionFactory()
    _, err = explain(str(question.pk), "--dry-run")
    assert "Warning" not in err


def test_a_reply_sent_back_for_quality_is_not_left_for_a_consumer(settings, llm_server):
    """A flagged reply that QUALITY_RETRY would run again: explain does not hand the retry
    to a consumer either; the flagged reply stays a revision."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "QUALITY_RETRY": "too_short"}
    llm_server.configure(answer="Four.")
    question = StudyQuestionFactory()
    with pytest.raises(CommandError, match="did not complete"):
        explain(str(question.pk))
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.error_code) == ("skipped", "")
    assert "too_short" in job.error_message
    assert transitions.next_due_in() is None
    assert job.study_question.revisions.count() == 1
