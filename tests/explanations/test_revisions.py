"""Revisions: regeneration keeps the old text until the new one completes, a failed one
changes nothing, an older revision can be made current again; outdated explanations."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.management import call_command
from django.urls import reverse

from studyqueue.explanations.prompts import current_version
from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)

FIRST = "Because two and two make four, as counting on your fingers shows."
SECOND = "Two plus two is four: add one four times, starting from zero, and you reach four."


def explain_once(llm_server, make_consumer, answer: str, **server) -> StudyQuestion:  # type: ignore[no-untyped-def]
    llm_server.configure(answer=answer, **server)
    question = StudyQuestion.objects.first() or StudyQuestionFactory(text="What is 2 + 2?")
    enqueue(question)
    make_consumer().run_cycle()
    question.refresh_from_db()
    return question


def test_regeneration_adds_a_revision_and_switches_only_when_complete(llm_server, make_consumer):
    question = explain_once(llm_server, make_consumer, FIRST)
    first = question.current_revision
    assert (question.explanation, first.text) == (FIRST, FIRST)
    assert question.explanation_prompt_version == first.prompt_version == current_version().hash
    # The regeneration's call is running: the old text is still the question's.
    llm_server.configure(answer=SECOND, delay=0.5)
    enqueue(question)
    consumer = make_consumer()
    import threading

    seen_during: list[str] = []

    def look() -> None:
        from django.db import connections

        from tests.helpers import wait_for

        try:
            wait_for(lambda: llm_server.stats()["active"] == 1, what="the regeneration call")
            seen_during.append(StudyQuestion.objects.get(pk=question.pk).explanation)
        finally:
            connections.close_all()

    watcher = threading.Thread(target=look)
    watcher.start()
    consumer.run_cycle()
    watcher.join()
    assert seen_during == [FIRST]
    question.refresh_from_db()
    assert question.explanation == SECOND
    assert list(question.revisions.values_list("text", flat=True)) == [SECOND, FIRST]


def test_a_failed_regeneration_leaves_the_current_explanation_untouched(llm_server, make_consumer):
    question = explain_once(llm_server, make_consumer, FIRST)
    llm_server.configure(fault="400")
    job = enqueue(question).job
    make_consumer().run_cycle()
    job.refresh_from_db()
    question.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "llm_rejected")
    assert (question.explanation, question.revisions.count()) == (FIRST, 1)


def test_an_older_revision_is_made_current_again_from_the_admin(
    llm_server, make_consumer, admin_client
):
    question = explain_once(llm_server, make_consumer, FIRST)
    explain_once(llm_server, make_consumer, SECOND)
    old = question.revisions.get(text=FIRST)
    response = admin_client.post(
        reverse("admin:studyqueue_explanationrevision_changelist"),
        {"action": "make_current", "_selected_action": [old.pk]},
        follow=True,
    )
    assert f"Revision {old.pk} is now the explanation" in response.content.decode()
    question.refresh_from_db()
    assert (question.explanation, question.current_revision_id) == (FIRST, old.pk)
    assert LogEntry.objects.filter(
        action_flag=CHANGE, object_id=str(question.pk), change_message__contains="revision"
    ).exists()
    page = admin_client.get(reverse("admin:studyqueue_studyquestion_change", args=[question.pk]))
    assert "(current)" in page.content.decode()


def test_outdated_explanations_are_found_filtered_and_regenerated(
    llm_server, make_consumer, settings, admin_client
):
    current = explain_once(llm_server, make_consumer, FIRST)
    old = StudyQuestionFactory(text="Old one?", explanation="Old text")
    StudyQuestion.objects.filter(pk=old.pk).update(explanation_prompt_version="abcdef012345")
    missing = StudyQuestionFactory(text="Not yet?")
    version = current_version().hash
    assert list(StudyQuestion.objects.outdated(version)) == [old]
    url = reverse("admin:studyqueue_studyquestion_changelist")
    for state, expected in (("current", current), ("outdated", old), ("missing", missing)):
        listed = admin_client.get(url, {"explanation": state}).context["cl"].result_list
        assert [q.pk for q in listed] == [expected.pk], state
    dashboard = admin_client.get(reverse("admin:studyqueue_queuedashboard_changelist"))
    assert dashboard.context["stats"].outdated == 1

    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out)
    assert out.getvalue().strip() == "Created 1 explanation job(s); 0 already queued."
    call_command("enqueue", "--outdated", stdout=out)  # idempotent: one active job
    assert StudyQuestionJob.objects.filter(study_question=old, status="pending").count() == 1
    # Consumers restarted with another model make every explanation outdated (the live
    # consumers' version counts, not this shell's); --limit bounds the batch.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_MODEL": "another-model"}
    make_consumer().run_cycle()  # regenerates the one queued, and reports its version
    out = StringIO()
    call_command("enqueue", "--outdated", "--limit", "5", stdout=out)
    assert out.getvalue().strip() == "Created 1 explanation job(s); 0 already queued."
    assert StudyQuestionJob.objects.filter(study_question=current, status="pending").exists()


def test_explain_dry_run_prints_the_prompt_and_its_version(llm_server):
    question = StudyQuestionFactory(text="Capital of France?", choices=["Paris", "Rome"])
    out = StringIO()
    call_command("explain", str(question.pk), "--dry-run", stdout=out)
    text = out.getvalue()
    version = current_version()
    assert text.startswith(f"prompt version {version.hash} ({version.label})")
    assert "--- system\n" in text and "--- user\n" in text and "1. Paris\n2. Rome" in text
    assert llm_server.stats()["requests"] == 0
    assert not StudyQuestionJob.objects.exists()


def test_explain_runs_one_job_now_and_prints_the_result(llm_server):
    llm_server.configure(answer=FIRST)
    question = StudyQuestionFactory(text="What is 2 + 2?")
    out = StringIO()
    call_command("explain", str(question.pk), stdout=out)
    text = out.getvalue()
    assert text.startswith(FIRST)
    assert "tokens: prompt 42, completion 7" in text and "time to first token" in text
    question.refresh_from_db()
    assert question.explanation == FIRST and question.revisions.count() == 1
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.worker_id.startswith("explain@")) == ("completed", True)


def test_explain_refuses_what_it_cannot_do(llm_server):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no study question with id 424242"):
        call_command("explain", "424242")
    question = StudyQuestionFactory()
    enqueue(question)
    transitions.claim(worker_id="busy-consumer", limit=1)
    with pytest.raises(CommandError, match="being explained right now by busy-consumer"):
        call_command("explain", str(question.pk))


def test_revisions_keep_their_metrics(llm_server, make_consumer):
    explain_once(llm_server, make_consumer, FIRST, word_delay=0.02)
    revision = ExplanationRevision.objects.get()
    assert (revision.prompt_tokens, revision.completion_tokens, revision.finish_reason) == (
        42,
        7,
        "stop",
    )
    assert revision.first_token_ms is not None
    # 6 tokens after the first over the ~0.22 s between the first word and the last.
    assert revision.tokens_per_second is not None and 10 < revision.tokens_per_second < 700
    # The job points at its reply and keeps its own LLM time; the reply's facts are here.
    assert revision.job is not None and revision.job.revision_id == revision.pk
    assert revision.job.llm_ms is not None and revision.job.llm_ms >= revision.first_token_ms


def test_a_real_reply_records_its_cache_and_decode_rate(llm_server, make_consumer):
    """the server's cached count is kept, and the rate is the
    decode rate, (n - 1) tokens over the first-to-last span: 11 words 50 ms apart span
    500 ms as sent, so 20 tokens/s (the old formula gave 22, and thousands for a short
    reply). The bound is generous: a loaded client may read the first word late."""
    words = "one two three four five six seven eight nine ten eleven"
    explain_once(
        llm_server, make_consumer, words, word_delay=0.05, completion_tokens=11,
        prompt_tokens=300, cached_tokens=280,
    )  # fmt: skip
    revision = ExplanationRevision.objects.get()
    assert (revision.prompt_tokens, revision.cached_tokens) == (300, 280)
    assert revision.tokens_per_second is not None
    assert 1 < revision.tokens_per_second < 200


@pytest.mark.parametrize(
    ("answer", "tokens", "whole"),
    [("Four.", 1, False), ("Four, as counting on your fingers shows.", 7, True)],
    ids=["one-token", "whole-json"],
)
def test_a_short_reply_has_no_decode_rate(llm_server, make_consumer, answer, tokens, whole):
    """One token has no decode time (it used to record thousands of tokens/s); a whole JSON
    reply comes at once, with no span to measure."""
    explain_once(llm_server, make_consumer, answer, completion_tokens=tokens, ignore_stream=whole)
    revision = ExplanationRevision.objects.get()
    assert revision.completion_tokens == tokens
    assert revision.tokens_per_second is None
    assert revision.cached_tokens is None  # the server did not say
