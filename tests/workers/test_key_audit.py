"""The key audit (``workers/key_audit.py``, ``explanations/key_audit.py``) against the test
LLM server, which answers audit calls by content (``AUDIT:<spec>`` in the question's text):
the verdicts, what the requests carry (never the key, no seed, a few tokens, temperature
above 0), the order (the audit before the explanation, in a real ``runconsumer --drain``),
the hold, a reviewer's decision, a content change, and a failed audit that does not block."""

from __future__ import annotations

import itertools
import json
from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.explanations import edits, key_audit, step_check, verifier
from studyqueue.models import (
    ExplanationRevision,
    KeyAudit,
    KeyCheck,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.pauses import pause
from tests.factories import StudyQuestionFactory
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = ["Busan", "Seoul", "Incheon"]


@pytest.fixture(autouse=True)
def explained_anyway(settings):  # type: ignore[no-untyped-def]
    """The audit's own behaviour: a dispute does not hold its explanation here, unless a
    test turns KEY_AUDIT_HOLDS on (the default; ``tests/explanations/test_next_step.py``)."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT_HOLDS": False}


def question(spec: str = "222", **fields) -> StudyQuestion:  # type: ignore[no-untyped-def]
    fields.setdefault("choices", CHOICES)
    fields.setdefault("answer", "Seoul")
    text = fields.pop("text", None) or f"Which city is the capital of Korea? AUDIT:{spec}"
    return StudyQuestionFactory(text=text, **fields)


def enqueue_missing() -> str:
    out = StringIO()
    call_command("enqueue", "--missing", stdout=out)
    return out.getvalue()


def drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


def audit_bodies(server: LLMServer) -> list[dict]:
    return [b for b in server.bodies if b["messages"][0]["content"] == key_audit.SYSTEM]


def kinds_in_order(server: LLMServer) -> list[str]:
    kinds = {key_audit.SYSTEM: "audit", verifier.SYSTEM: "verify", step_check.SYSTEM: "step"}
    return [kinds.get(b["messages"][0]["content"], "explanation") for b in server.bodies]


@pytest.mark.parametrize(
    ("spec", "verdict", "answer", "asked"),
    [
        ("222", KeyAudit.AGREES, None, 2),  # two of three name the key: settled
        ("212", KeyAudit.AGREES, None, 3),  # a majority names the key
        ("333", KeyAudit.DISPUTED, 3, 3),  # every sample names the same other choice
        ("331", KeyAudit.UNSURE, None, 3),
        ("13", KeyAudit.UNSURE, None, 2),  # neither can come any more
        ("2xx", KeyAudit.UNSURE, None, 3),  # unread replies never agree
        ("xxx", KeyAudit.UNSURE, None, 2),
    ],
)
def test_the_verdict_from_the_samples(llm_server, spec, verdict, answer, asked):
    q = question(spec)
    assert "Created 1 key_audit job(s)" in enqueue_missing()
    drain()
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_answer) == (verdict, answer)
    assert len(q.key_audit_samples) == asked
    assert len(audit_bodies(llm_server)) == asked
    assert q.key_audit_hash == q.content_hash()
    audit = StudyQuestionJob.objects.get(kind="key_audit")
    assert (audit.status, audit.attempts) == ("completed", 1)


def test_the_requests_never_carry_the_key_nor_a_seed(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT_SAMPLES": 5}
    q = question("11111", choices=["Busan", "Seoul"], answer="Seoul")
    enqueue_missing()
    drain()
    bodies = audit_bodies(llm_server)
    assert len(bodies) == 5
    for body in bodies:
        # The question and its numbered choices, and nothing else of the question.
        assert body["messages"][-1]["content"] == (
            "Question:\nWhich city is the capital of Korea? AUDIT:11111\n\n"
            "Choices:\n1. Busan\n2. Seoul"
        )
        assert "Correct answer" not in json.dumps(body["messages"])
        assert "seed" not in body
        assert body["max_tokens"] <= 16
        assert body["temperature"] > 0
    # The explanation's prompt does carry the key: the audit's is another prompt.
    explanation = [b for b in llm_server.bodies if b not in bodies]
    assert "Correct answer: Seoul" in explanation[0]["messages"][-1]["content"]
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_answer) == (KeyAudit.DISPUTED, 1)


def test_a_drain_runs_the_audit_before_the_explanation(llm_server):
    """The explanation job is queued too (and first in id order when it already was), but it
    waits while the question's audit is active."""
    first = question("222")
    enqueue(first)  # an explanation already queued, before the audit
    second = question("333", text="Which city is the capital of Korea, again? AUDIT:333")
    out = enqueue_missing()
    assert "Created 2 key_audit job(s)" in out
    assert "Created 1 explanation job(s); 0 already queued." in out
    drain()
    # Then the blind verifier and the step check check each explanation, once none is ready.
    kinds = kinds_in_order(llm_server)
    assert kinds[:7] == ["audit"] * 5 + ["explanation"] * 2
    assert sorted(kinds[7:]) == ["step"] * 2 + ["verify"] * 2
    for q in (first, second):
        q.refresh_from_db()
        assert q.explanation  # a dispute is still explained (KEY_AUDIT_HOLDS off)
    assert set(StudyQuestionJob.objects.values_list("kind", "status")) == {
        ("key_audit", "completed"),
        ("explanation", "completed"),
        ("verification", "completed"),
        ("step_check", "completed"),
    }


def test_questions_without_choices_or_key_and_the_setting_off_are_not_audited(llm_server, settings):
    StudyQuestionFactory(choices=[], answer="4")
    StudyQuestionFactory(choices=["3", "4"], answer="")
    assert "key_audit" not in enqueue_missing()
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": False}
    question("222")
    assert "key_audit" not in enqueue_missing()
    drain()
    assert audit_bodies(llm_server) == []


def test_a_held_dispute_spends_no_call_until_a_reviewer_decides(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT_HOLDS": True}
    q = question("333")
    agreed = question("222", text="Capital of Korea? AUDIT:222")
    enqueue_missing()
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.DISPUTED and q.explanation == ""
    job = StudyQuestionJob.objects.get(study_question=q, kind="explanation")
    assert (job.status, job.attempts) == ("pending", 0)
    assert not transitions.has_ready()
    assert transitions.claim(worker_id="w", limit=10) == []
    agreed.refresh_from_db()
    assert agreed.explanation  # only the dispute waits
    calls = len(llm_server.bodies)

    assert key_audit.decide_key(q, take_model_choice=False, by="reviewer")
    assert not key_audit.decide_key(q, take_model_choice=True, by="late")  # decided already
    drain()  # the explanation runs at once after
    q.refresh_from_db()
    assert q.explanation and len(llm_server.bodies) == calls + 3  # explained, then checked twice
    assert (q.key_check, q.key_check_by, q.answer) == (KeyCheck.KEPT, "reviewer", "Seoul")
    assert key_audit.rates() == key_audit.Rates(audited=2, disputed=1, upheld=0, kept=1)


def test_taking_the_models_choice_changes_the_key_and_voids_an_approval(llm_server):
    q = question("333")
    enqueue_missing()
    drain()
    q.refresh_from_db()
    revision = ExplanationRevision.objects.get(question=q)
    ExplanationRevision.objects.filter(pk=revision.pk).update(review_status="approved")
    assert key_audit.decide_key(q, take_model_choice=True, by="reviewer")
    q.refresh_from_db()
    revision.refresh_from_db()
    assert q.answer == "Incheon" and revision.review_status == "unreviewed"
    assert (q.key_audit, q.key_check, q.key_check_by) == (KeyAudit.AGREES, "changed", "reviewer")
    assert q.key_audit_hash == q.content_hash()
    assert key_audit.rates() == key_audit.Rates(audited=1, disputed=1, upheld=1, kept=0)
    # Audited for this content: no new audit.
    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out)
    assert "key_audit" not in out.getvalue()


def test_a_content_change_clears_the_audit_and_a_new_one_runs_before_the_explanation(
    llm_server,
):
    q = question("222")
    enqueue_missing()
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.AGREES
    with edits.editing([q.pk]):
        StudyQuestion.objects.filter(pk=q.pk).update(text="Capital of Korea? AUDIT:333")
    q.refresh_from_db()
    assert (q.key_audit, q.key_audit_answer, q.key_audit_samples) == ("", None, [])
    assert not StudyQuestionJob.objects.active().exists()  # nothing waits: nothing queued
    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out)
    assert "Created 1 key_audit job(s)" in out.getvalue()
    drain()
    q.refresh_from_db()
    assert q.key_audit == KeyAudit.DISPUTED
    assert kinds_in_order(llm_server)[-6:] == ["audit"] * 3 + ["explanation", "verify", "step"]


def test_a_failed_audit_ends_and_the_explanation_still_runs(llm_server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 1}
    q = question(text="Which city? FAULT:400 AUDIT:222")
    enqueue_missing()
    drain()
    audit = StudyQuestionJob.objects.get(kind="key_audit")
    explanation = StudyQuestionJob.objects.get(kind="explanation")
    assert (audit.status, audit.error_code) == ("failed", "llm_rejected")
    assert explanation.status == "failed"  # its own call, its own failure: it was not held
    q.refresh_from_db()
    assert q.key_audit == ""


def test_a_paused_audit_kind_does_not_hold_explanations(llm_server):
    q = question("222")
    pause("key_audit")
    enqueue_missing()
    drain()
    q.refresh_from_db()
    assert q.explanation and q.key_audit == ""
    assert StudyQuestionJob.objects.get(kind="key_audit").status == "pending"
    assert QueuePause.objects.filter(kind="key_audit").exists()


def test_claim_takes_exactly_the_ready_jobs_with_audits(settings):
    """A claim takes what ``ready`` lists, in every state of the audit, held or not."""
    waiting = question("222")
    enqueue(waiting)
    enqueue(waiting, "key_audit")
    disputed = question("333", text="Q2 AUDIT:333")
    StudyQuestion.objects.filter(pk=disputed.pk).update(key_audit="disputed", key_audit_answer=3)
    enqueue(disputed)
    free = question("222", text="Q3")
    enqueue(free)
    both = {f"key_audit:{waiting.pk}", f"explanation:{free.pk}"}
    for holds, expected in ((True, both), (False, both | {f"explanation:{disputed.pk}"})):
        settings.STUDYQUEUE = {"KEY_AUDIT_HOLDS": holds}
        ready = transitions.ready()
        assert {f"{job.kind}:{job.study_question_id}" for job in ready} == expected
        claimed = transitions.claim(worker_id="w", limit=100)
        assert {f"{job.kind}:{job.study_question_id}" for job in claimed} == expected
        StudyQuestionJob.objects.filter(pk__in=[job.pk for job in claimed]).update(
            status="pending", attempts=0, claim_token=None
        )


def test_judge_needs_a_key_that_names_a_choice():
    assert key_audit.judge([2, 2, 2], None) == key_audit.Verdict(KeyAudit.DISPUTED, 2)
    assert key_audit.judge([None, None, None], 2).key_audit == KeyAudit.UNSURE
    assert key_audit.judge([], 2).key_audit == KeyAudit.UNSURE


def test_export_rows_carry_the_key_audit(llm_server):
    disputed = question("333")
    agreed = question("222", text="Capital of Korea? AUDIT:222")
    StudyQuestionFactory(text="No choices", choices=[], answer="")
    enqueue_missing()
    drain()
    out = StringIO()
    call_command("exportexplanations", stdout=out, stderr=StringIO())
    rows = {row["id"]: row for row in map(json.loads, out.getvalue().splitlines())}
    assert (rows[disputed.pk]["key_audit"], rows[disputed.pk]["key_audit_answer"]) == (
        "disputed",
        3,
    )
    assert (rows[agreed.pk]["key_audit"], rows[agreed.pk]["key_audit_answer"]) == ("agrees", None)
    (other,) = set(rows) - {disputed.pk, agreed.pk}
    assert (rows[other]["key_audit"], rows[other]["key_audit_answer"]) == ("", None)
    csv_out = StringIO()
    call_command("exportexplanations", "--format", "csv", stdout=csv_out, stderr=StringIO())
    header = csv_out.getvalue().splitlines()[0]
    assert "review_status,key_audit,key_audit_answer," in header


@pytest.mark.parametrize("planned", [1, 2, 3, 4, 5])
def test_stopping_once_settled_gives_the_verdict_all_samples_would(planned):
    """Every sequence of answers (the key, two others, unread): the samples taken up to the
    first settled point are judged as all ``planned`` of them would be."""
    for full in itertools.product([2, 1, 3, None], repeat=planned):
        taken = []
        for answer in full:
            taken.append(answer)
            if key_audit.settled(taken, 2, planned):
                break
        assert key_audit.judge(taken, 2) == key_audit.judge(list(full), 2), (full, taken)


def test_an_audit_whose_server_fails_is_finished_by_another_without_losing_its_attempt(
    llm_server, settings
):
    """Two servers; the first answers 503 to everything. The audit's calls move to the
    second within the same attempt, and its verdict is the one the samples give."""
    failing = LLMServer().start()
    try:
        failing.configure(fault="503")
        settings.STUDYQUEUE = {
            **settings.STUDYQUEUE,
            "LLM_URL": f"{failing.url},{llm_server.url}",
            "VERIFY": False,
            "STEP_CHECK": False,
        }
        q = question("333")
        enqueue_missing()
        drain()
        q.refresh_from_db()
        assert (q.key_audit, q.key_audit_answer) == (KeyAudit.DISPUTED, 3)
        audit = StudyQuestionJob.objects.get(study_question=q, kind="key_audit")
        assert (audit.status, audit.attempts) == ("completed", 1)
        assert failing.stats()["requests"] >= 1 and len(audit_bodies(llm_server)) == 3
    finally:
        failing.stop()
