"""What a question needs next (``explanations/next_step.py``): every entry point that queues an
explanation queues the key audit first, the claim takes the audit before the explanation it
guards, and a disputed key stays held through an edit of its text — with the defaults
(KEY_AUDIT and KEY_AUDIT_HOLDS on), against the test LLM server, which answers audit calls by
content (``AUDIT:<spec>`` in the question's text)."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from studyqueue.explanations import (
    edits,
    key_audit,
    next_step,
    review_queue,
    step_check,
    verifier,
)
from studyqueue.models import (
    ExplanationRevision,
    KeyAudit,
    ReviewStatus,
    StudyQuestion,
    StudyQuestionJob,
)
from studyqueue.queue import transitions
from studyqueue.sets import question_sets
from tests.factories import StudyQuestionFactory
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = ["Busan", "Seoul", "Incheon"]
TEXT = "Which city is the capital of Korea? AUDIT:{spec}"


@pytest.fixture
def holds(settings):  # type: ignore[no-untyped-def]
    """The product's defaults: audit first, and a disputed key holds its explanation."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": True, "KEY_AUDIT_HOLDS": True}


def question(spec: str = "222", external_id: str | None = None) -> StudyQuestion:
    return StudyQuestionFactory(
        text=TEXT.format(spec=spec), choices=CHOICES, answer="Seoul", external_id=external_id
    )


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


def kinds_in_order(server: LLMServer) -> list[str]:
    kinds = {key_audit.SYSTEM: "audit", verifier.SYSTEM: "verify", step_check.SYSTEM: "step"}
    return [kinds.get(b["messages"][0]["content"], "explanation") for b in server.bodies]


def post_form(client: Client, q: StudyQuestion, **changed: str) -> list[str]:
    """The question's change form saved as a person does in the admin."""
    form = {
        "text": q.text,
        "choices": "\n".join(q.choices),
        "answer": q.answer,
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
        **changed,
    }
    url = reverse("admin:studyqueue_studyquestion_change", args=[q.pk])
    response = client.post(url, form, follow=True)
    assert response.redirect_chain and response.redirect_chain[0][1] == 302
    return [str(m) for m in get_messages(response.wsgi_request)]


# --------------------------------------------------------------------------- every entry point


def _import(tmp_path: Path, client: Client) -> StudyQuestion:
    path = tmp_path / "questions.jsonl"
    row = {"external_id": "q1", "text": TEXT.format(spec="222"), "choices": CHOICES}
    path.write_text(json.dumps({**row, "answer": "Seoul"}) + "\n")
    out = command("importquestions", str(path), "--enqueue")
    assert "1 key audit job(s) to run before them" in out
    return StudyQuestion.objects.get(external_id="q1")


def _enqueue(*args: str) -> Callable[[Path, Client], StudyQuestion]:
    def run(tmp_path: Path, client: Client) -> StudyQuestion:
        q = question()
        out = command("enqueue", *[a.format(id=q.pk) for a in args])
        assert "Created 1 key_audit job(s) to run before the explanations." in out
        return q

    return run


def _set(tmp_path: Path, client: Client) -> StudyQuestion:
    q = question()
    question_sets.add("exam", [q.pk])
    assert "key_audit" in command("enqueue", "--set", "exam")
    return q


def _outdated(tmp_path: Path, client: Client) -> StudyQuestion:
    """An explained question whose text changed: its audit is void, its explanation outdated."""
    q = question()
    StudyQuestion.objects.filter(pk=q.pk).update(explanation="old", explanation_prompt_version="x")
    assert "key_audit" in command("enqueue", "--outdated")
    return q


def _admin_action(tmp_path: Path, client: Client) -> StudyQuestion:
    q = question()
    response = client.post(
        reverse("admin:studyqueue_studyquestion_changelist"),
        {"action": "regenerate_explanation", "_selected_action": [str(q.pk)]},
        follow=True,
    )
    assert "Queued 1 key audit job(s) to run before the explanations." in response.content.decode()
    return q


def _review_reject(tmp_path: Path, client: Client) -> StudyQuestion:
    """A reviewer rejects an explanation of a question whose audit is void."""
    q = question()
    revision = ExplanationRevision.objects.create(question=q, text="Seoul. Answer: Seoul")
    StudyQuestion.objects.filter(pk=q.pk).update(current_revision=revision, explanation="x")
    result = review_queue.decide(revision.pk, ReviewStatus.REJECTED, by="ana")
    assert result.job_id is not None
    return q


ENTRY_POINTS = {
    "importquestions --enqueue": _import,
    "enqueue --missing": _enqueue("--missing"),
    "enqueue --question": _enqueue("--question", "{id}"),
    "enqueue --set": _set,
    "enqueue --outdated": _outdated,
    "the admin's regenerate action": _admin_action,
    "a reviewer's reject": _review_reject,
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_entry_point_queues_the_audit_first_and_the_claim_takes_it_first(
    holds, admin_client, tmp_path, entry
):
    q = ENTRY_POINTS[entry](tmp_path, admin_client)
    jobs = StudyQuestionJob.objects.filter(study_question=q).active()
    assert set(jobs.values_list("kind", flat=True)) == {"key_audit", "explanation"}
    # Ready now: the audit alone; the explanation waits for it.
    assert [job.kind for job in transitions.ready()] == ["key_audit"]
    (claimed,) = transitions.claim(worker_id="w", limit=10)
    assert claimed.kind == "key_audit"


def test_queue_jobs_of_another_kind_queues_no_audit(holds):
    q = question()
    queued = next_step.queue_jobs([q.pk], "verification")
    assert (queued.created, queued.audits) == (1, 0)
    assert list(StudyQuestionJob.objects.values_list("kind", flat=True)) == ["verification"]


def test_a_question_audited_for_its_content_is_not_audited_again(holds, llm_server):
    q = question()
    assert next_step.queue_jobs([q.pk]).audits == 1
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.AGREES and q.explanation
    assert next_step.queue_jobs([q.pk]) == next_step.Queued(requested=1, created=1, audits=0)


# ---------------------------------------------------------------- the path the manual teaches


def test_an_imported_set_gets_its_audits_first_and_wrong_keys_are_never_explained(
    holds, llm_server, tmp_path
):
    rows = [
        {"external_id": f"q{n}", "text": TEXT.format(spec=spec), "choices": CHOICES}
        for n, spec in enumerate(["222", "333", "222", "111"])
    ]
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps({**r, "answer": "Seoul"}) + "\n" for r in rows))
    out = command("importquestions", str(path), "--set", "exam", "--enqueue")
    assert "queued 4 explanation job(s) and 4 key audit job(s) to run before them" in out
    drain()
    bodies = llm_server.bodies
    for row in rows:
        q = StudyQuestion.objects.get(external_id=row["external_id"])
        mine = [b for b in bodies if q.text in b["messages"][-1]["content"]]
        kinds = [
            {key_audit.SYSTEM: "audit", verifier.SYSTEM: "verify", step_check.SYSTEM: "step"}.get(
                b["messages"][0]["content"], "explanation"
            )
            for b in mine
        ]
        assert kinds[:2] == ["audit", "audit"]  # at least two samples before anything else
        if q.key_audit == KeyAudit.DISPUTED:
            assert "explanation" not in kinds and q.explanation == ""
        else:
            assert kinds.index("explanation") > kinds.index("audit")
    disputed = StudyQuestion.objects.filter(key_audit=KeyAudit.DISPUTED)
    assert sorted(disputed.values_list("external_id", flat=True)) == ["q1", "q3"]
    exported = command(
        "exportexplanations", "--format", "jsonl", "--include-missing", "--set", "exam"
    )
    by_id = {row["external_id"]: row for row in map(json.loads, exported.splitlines())}
    assert by_id["q1"]["key_audit"] == "disputed" and by_id["q1"]["waiting_on"] == "key_check"
    assert by_id["q1"]["key_audit_answer"] == 3 and by_id["q3"]["key_audit_answer"] == 1


# ---------------------------------------------------------------- the hold through an edit


def test_a_text_edit_keeps_a_held_key_held_and_audits_it_again(holds, llm_server, admin_client):
    q = question("333")
    command("enqueue", "--missing")
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.DISPUTED and q.explanation == ""
    calls = len(llm_server.bodies)

    # A typo fixed in the admin's form; the key is as wrong as before.
    said = post_form(admin_client, q, text="Which city is the capital of Korea ? AUDIT:333")
    assert "A new key audit was queued; the explanation waits for it." in said[0]
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_answer, q.key_audit_hash) == (KeyAudit.DISPUTED, 3, "")
    assert list(key_audit.key_checks()) == [q]  # the review queue still shows the dispute
    assert [job.kind for job in transitions.ready()] == ["key_audit"]
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.DISPUTED and q.key_audit_hash == q.content_hash()
    assert q.explanation == "" and kinds_in_order(llm_server)[calls:] == ["audit"] * 3
    explanation = StudyQuestionJob.objects.get(study_question=q, kind="explanation")
    assert (explanation.status, explanation.attempts) == ("pending", 0)

    # The text fixed for real: the model now names the key, and the explanation runs.
    post_form(admin_client, q, text="Which city is the capital of Korea? AUDIT:222")
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.AGREES and q.explanation
    assert kinds_in_order(llm_server)[calls + 3 :] == [
        "audit", "audit", "explanation", "verify", "step",
    ]  # fmt: skip


def test_a_reimport_that_changes_a_held_questions_text_keeps_it_held(holds, llm_server, tmp_path):
    q = question("333", external_id="q1")
    command("enqueue", "--missing")
    drain()
    path = tmp_path / "fixed.jsonl"
    row = {"external_id": "q1", "text": q.text + " (edited)", "choices": CHOICES, "answer": "Seoul"}
    path.write_text(json.dumps(row) + "\n")
    command("importquestions", str(path), "--enqueue")
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.DISPUTED and q.explanation == ""
    assert q.key_audit_hash == q.content_hash()  # audited again, for the new text


def test_changing_the_key_in_the_form_audits_the_new_key_before_the_explanation(
    holds, llm_server, admin_client
):
    q = question("333")
    command("enqueue", "--missing")
    drain()
    post_form(admin_client, q, answer="Incheon")  # the model's choice made the key by hand
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_samples) == ("", [])  # the reviewer's decision: cleared
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.AGREES and q.explanation


def test_an_edit_outside_editing_changes_nothing_else(holds):
    """A model's save writes its own row: what an edit means is ``edits.editing``'s."""
    q = question("333")
    StudyQuestion.objects.filter(pk=q.pk).update(
        key_audit=KeyAudit.DISPUTED, key_audit_answer=3, key_audit_hash=q.content_hash()
    )
    q.refresh_from_db()
    q.text = "changed"
    q.save()
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_hash) == (
        KeyAudit.DISPUTED,
        StudyQuestion(text=TEXT.format(spec="333"), choices=CHOICES, answer="Seoul").content_hash(),
    )
    assert not StudyQuestionJob.objects.exists()
    with edits.editing([q.pk]) as edited:
        StudyQuestion.objects.filter(pk=q.pk).update(text="changed again")
    assert edited.changed == [q.pk]
    assert list(StudyQuestionJob.objects.values_list("kind", flat=True)) == ["key_audit"]


def test_explain_refuses_a_held_question(holds, llm_server):
    """``explain`` claims its job directly: it holds a disputed key as the claim does."""
    q = question("333")
    command("enqueue", "--missing")
    drain()
    calls = len(llm_server.bodies)
    with pytest.raises(CommandError, match="is held: its key audit disputed the key"):
        command("explain", str(q.pk))
    assert len(llm_server.bodies) == calls
    job = StudyQuestionJob.objects.get(study_question=q, kind="explanation")
    assert (job.status, job.attempts) == ("pending", 0)


def test_the_form_says_when_an_edit_voids_an_approval(admin_client, llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": False}
    q = question()
    next_step.queue_jobs([q.pk])
    drain()
    q.refresh_from_db()
    review_queue.decide(q.current_revision_id, ReviewStatus.APPROVED, by="ana")
    said, saved = post_form(admin_client, q, text=q.text + " (reworded)")
    assert "was changed successfully" in saved
    assert said.startswith("Its text, choices or key changed: its explanation is outdated")
    assert "The approval of its explanation is void" in said
    assert "key audit" not in said
    q.refresh_from_db()
    (unchanged,) = post_form(admin_client, q)  # saved as shown: Django's own message alone
    assert "was changed successfully" in unchanged
