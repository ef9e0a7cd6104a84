"""A question changed while its job is calling the LLM: the reply written for the old content is
never stored for the new one, and the job runs again on the new content (re-import with
--enqueue, the admin's edit); a question rewritten on every call still ends."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.urls import reverse

from studyqueue.explanations import edits
from studyqueue.models import ExplanationRevision, ReviewStatus, StudyQuestion, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

OLD_TEXT, NEW_TEXT = "What is the capital of Australia?", "What is the capital of Canada?"
OLD_REPLY = "Canberra is the capital of Australia: a compromise between Sydney and Melbourne."
NEW_REPLY = "Ottawa is the capital of Canada: Queen Victoria chose it in 1857, far from the border."


def write_jsonl(path: Path, text: str) -> str:
    path.write_text(json.dumps({"text": text, "external_id": "q1"}) + "\n")
    return str(path)


def import_file(file: str, *options: str) -> str:
    out = StringIO()
    call_command("importquestions", file, *options, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def during_the_call(llm_server, change: Callable[[], None], after: int = 1) -> threading.Thread:  # type: ignore[no-untyped-def]
    """In another thread (its own database connection): once the ``after``-th call is being
    answered and held, ``change`` the question, then let the replies go."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            wait_for(
                lambda: llm_server.stats()["requests"] >= after and llm_server.stats()["active"],
                what="the LLM call",
            )
            change()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            llm_server.configure(answer=NEW_REPLY)  # what the next call gets
            llm_server.let_through(2)
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_a_reimport_during_the_call_is_explained_for_its_new_text(
    llm_server, make_consumer, tmp_path
):
    first = import_file(write_jsonl(tmp_path / "a.jsonl", OLD_TEXT), "--enqueue")
    assert first.endswith("1 created, 0 updated, 0 unchanged; queued 1 explanation job(s).")
    llm_server.configure(answer=OLD_REPLY, held=True)
    outputs: list[str] = []
    changed = write_jsonl(tmp_path / "b.jsonl", NEW_TEXT)
    watcher = during_the_call(llm_server, lambda: outputs.append(import_file(changed, "--enqueue")))
    result = make_consumer().run_cycle()
    watcher.join()
    assert watcher.errors == []  # type: ignore[attr-defined]
    # Truthful: the running job was there, and it explains the new text.
    assert outputs == [
        "Imported 1 row(s): 0 created, 1 updated, 0 unchanged; queued 0 explanation job(s), "
        "1 already queued or running (they explain the new text)."
    ]
    assert result.outcomes == {"released": 1, "completed": 1}
    prompts = [body["messages"][-1]["content"] for body in llm_server.bodies]
    assert [OLD_TEXT in p for p in prompts] == [True, False]
    assert [NEW_TEXT in p for p in prompts] == [False, True]
    question = StudyQuestion.objects.get()
    assert (question.text, question.explanation) == (NEW_TEXT, NEW_REPLY)
    assert list(ExplanationRevision.objects.values_list("text", flat=True)) == [NEW_REPLY]
    job = StudyQuestionJob.objects.get()
    # The dropped reply cost no attempt.
    assert (job.status, job.attempts, job.free_releases) == ("completed", 1, 0)


def test_an_admin_edit_during_the_call_is_explained_for_its_new_text(
    llm_server, make_consumer, admin_user
):
    question = StudyQuestion.objects.create(text=OLD_TEXT, choices=["Sydney", "Canberra"])
    enqueue(question)
    llm_server.configure(answer=OLD_REPLY, held=True)

    def edit() -> None:
        client = Client()
        client.force_login(admin_user)
        url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
        response = client.post(
            url,
            {
                "text": NEW_TEXT,
                "choices": "Toronto\nOttawa",
                "answer": "",
                "jobs-TOTAL_FORMS": "0",
                "jobs-INITIAL_FORMS": "0",
                "revisions-TOTAL_FORMS": "0",
                "revisions-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302

    watcher = during_the_call(llm_server, edit)
    assert make_consumer().run_cycle().outcomes == {"released": 1, "completed": 1}
    watcher.join()
    assert watcher.errors == []  # type: ignore[attr-defined]
    question.refresh_from_db()
    assert (question.choices, question.explanation) == (["Toronto", "Ottawa"], NEW_REPLY)
    assert "Ottawa" in llm_server.bodies[-1]["messages"][-1]["content"]
    assert ExplanationRevision.objects.get().text == NEW_REPLY


def test_a_question_rewritten_on_every_call_still_ends(llm_server, make_consumer, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 1}
    question = StudyQuestion.objects.create(text="Version 0?")
    job = enqueue(question).job
    llm_server.configure(answer=OLD_REPLY, held=True)
    errors: list[BaseException] = []

    def rewrite_every_call() -> None:
        try:
            for call in range(1, 4):
                wait_for(
                    lambda call=call: (
                        llm_server.stats()["requests"] == call and llm_server.stats()["active"]
                    ),
                    what=f"call {call}",
                )
                StudyQuestion.objects.filter(pk=question.pk).update(text=f"Version {call}?")
                llm_server.let_through()
        except BaseException as exc:
            errors.append(exc)
            llm_server.let_through(3)
        finally:
            connections.close_all()

    thread = threading.Thread(target=rewrite_every_call)
    thread.start()
    result = make_consumer().run_cycle()
    thread.join()
    assert errors == []
    # Two free runs again (MAX_FREE_RELEASES), then the attempt counts: the last one.
    assert result.outcomes == {"released": 2, "failed": 1}
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts) == ("failed", "question_changed", 1)
    assert llm_server.stats()["requests"] == 3
    assert not ExplanationRevision.objects.exists()
    assert StudyQuestion.objects.get().explanation == ""


def test_a_change_after_the_reply_was_stored_gets_a_new_job(llm_server, make_consumer, tmp_path):
    import_file(write_jsonl(tmp_path / "a.jsonl", OLD_TEXT), "--enqueue")
    llm_server.configure(answer=OLD_REPLY)
    make_consumer().run_cycle()
    out = import_file(write_jsonl(tmp_path / "b.jsonl", NEW_TEXT), "--enqueue")
    assert out.endswith("0 created, 1 updated, 0 unchanged; queued 1 explanation job(s).")
    llm_server.configure(answer=NEW_REPLY)
    make_consumer().run_cycle()
    assert StudyQuestion.objects.get().explanation == NEW_REPLY


def approved_with_a_candidate(llm_server, make_consumer, tmp_path) -> StudyQuestion:  # type: ignore[no-untyped-def]
    """q1 explained and approved, and a regeneration of it waiting as a candidate."""
    from studyqueue.explanations import review_queue

    import_file(write_jsonl(tmp_path / "a.jsonl", OLD_TEXT), "--enqueue")
    llm_server.configure(answer=OLD_REPLY)
    make_consumer().run_cycle()
    question = StudyQuestion.objects.get()
    review_queue.decide(question.current_revision_id, ReviewStatus.APPROVED, by="ana")
    enqueue(question)
    llm_server.configure(answer=OLD_REPLY + " Again.")
    make_consumer().run_cycle()
    assert ExplanationRevision.objects.filter(candidate=True).count() == 1
    return StudyQuestion.objects.get()


def export_approved() -> list[dict]:
    out = StringIO()
    call_command("exportexplanations", "--approved", stdout=out, stderr=StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _admin_form(question: StudyQuestion, admin_user, **changed: str) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(admin_user)
    form = {
        "text": question.text,
        "choices": "\n".join(question.choices),
        "answer": question.answer,
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
        **changed,
    }
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    assert client.post(url, form).status_code == 302


def _save(question: StudyQuestion, **changed: object) -> None:
    for name, value in changed.items():
        setattr(question, name, value)
    with edits.editing([question.pk]):
        question.save()


def _update(question: StudyQuestion, **changed: object) -> None:
    with edits.editing([question.pk]):
        StudyQuestion.objects.filter(pk=question.pk).update(**changed)


# Every path that changes what the prompt is built from (text, choices or the key), code
# inside ``edits.editing`` too.
CHANGES = {
    "reimport": lambda q, tmp_path, admin_user: import_file(
        write_jsonl(tmp_path / "b.jsonl", NEW_TEXT)
    ),
    "admin form": lambda q, tmp_path, admin_user: _admin_form(q, admin_user, answer="Ottawa"),
    "code, save": lambda q, tmp_path, admin_user: _save(q, choices=["Toronto", "Ottawa"]),
    "code, update": lambda q, tmp_path, admin_user: _update(q, text=NEW_TEXT),
}


@pytest.mark.parametrize("path", list(CHANGES))
def test_a_content_change_voids_the_approval_and_the_candidates_written_for_the_old_content(
    llm_server, make_consumer, tmp_path, admin_user, path
):
    from studyqueue.exceptions import ReviewConflict
    from studyqueue.explanations import review_queue

    question = approved_with_a_candidate(llm_server, make_consumer, tmp_path)
    approved = question.current_revision
    candidate = ExplanationRevision.objects.get(candidate=True)
    assert [row["id"] for row in export_approved()] == [question.pk]
    CHANGES[path](question, tmp_path, admin_user)
    question.refresh_from_db()
    approved.refresh_from_db()
    # The old explanation is still shown, but nobody approved it for this content.
    assert question.current_revision == approved and question.explanation == OLD_REPLY
    assert (approved.review_status, approved.reviewed_by, approved.reviewed_at) == (
        "unreviewed",
        "",
        None,
    )
    assert export_approved() == []
    assert not ExplanationRevision.objects.filter(review_status="approved").exists()
    assert list(review_queue.waiting()) == [question]
    # The candidate written for the old content waits no more and cannot be accepted.
    assert not ExplanationRevision.objects.filter(candidate=True).exists()
    assert review_queue.item(question.pk).revision == approved
    with pytest.raises(ReviewConflict):
        review_queue.decide(candidate.pk, ReviewStatus.APPROVED, by="bo")
    # The regeneration becomes current at once (nothing approved to protect).
    enqueue(question)
    llm_server.configure(answer=NEW_REPLY)
    make_consumer().run_cycle()
    question.refresh_from_db()
    assert question.explanation == NEW_REPLY and not question.current_revision.candidate


def test_a_reimport_or_save_that_changes_nothing_keeps_the_approval(
    llm_server, make_consumer, tmp_path, admin_user
):
    question = approved_with_a_candidate(llm_server, make_consumer, tmp_path)
    out = import_file(write_jsonl(tmp_path / "same.jsonl", OLD_TEXT))
    assert out.endswith("0 created, 0 updated, 1 unchanged.")
    question.save()  # no field changed
    _admin_form(question, admin_user)  # the form saved as it was shown
    StudyQuestion.objects.filter(pk=question.pk).update(text=OLD_TEXT)  # the same text
    assert [row["id"] for row in export_approved()] == [question.pk]
    assert ExplanationRevision.objects.filter(candidate=True).count() == 1


@pytest.mark.parametrize("path", list(CHANGES))
def test_a_content_change_makes_the_explanation_outdated_until_it_is_written_again(
    llm_server, make_consumer, tmp_path, admin_user, path
):
    from studyqueue.explanations.prompts import current_version

    question = approved_with_a_candidate(llm_server, make_consumer, tmp_path)
    version = current_version().hash
    questions = StudyQuestion.objects.all()
    assert list(questions.outdated(version)) == [] and list(questions.current(version)) == [
        question
    ]
    CHANGES[path](question, tmp_path, admin_user)
    # Written by today's prompt, but for content the question no longer holds.
    assert list(questions.outdated(version)) == [question]
    assert list(questions.current(version)) == []
    assert list(questions.flagged("question_changed")) == [question]
    question.refresh_from_db()
    question.save()  # a later save keeps the mark
    assert list(questions.flagged("question_changed")) == [question]
    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out, stderr=StringIO())
    assert queue_jobs_for(question) == 1, out.getvalue()
    llm_server.configure(answer=NEW_REPLY)
    make_consumer().run_cycle()
    assert list(questions.current(version)) == [question]
    assert list(questions.flagged("question_changed")) == []


def queue_jobs_for(question: StudyQuestion) -> int:
    from studyqueue.models import StudyQuestionJob

    jobs = StudyQuestionJob.objects.filter(study_question=question)
    return jobs.exclude(status="completed").count()


def test_a_content_change_voids_the_approvals_of_older_revisions_too(
    llm_server, make_consumer, tmp_path
):
    from studyqueue.explanations import review_queue

    question = approved_with_a_candidate(llm_server, make_consumer, tmp_path)
    first = question.current_revision
    candidate = ExplanationRevision.objects.get(candidate=True)
    review_queue.decide(candidate.pk, ReviewStatus.APPROVED, by="bo")
    first.refresh_from_db()
    assert first.review_status == "approved"  # superseded, still approved
    import_file(write_jsonl(tmp_path / "b.jsonl", NEW_TEXT))
    statuses = ExplanationRevision.objects.values_list("review_status", flat=True)
    assert set(statuses) == {"unreviewed"}
