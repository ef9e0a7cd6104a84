"""The blind verifier (``workers/verification.py``, ``explanations/verifier.py``) against the
test LLM server, which answers verifier calls by content (``VERIFY:<spec>`` in the
question's text) or through a test's own reader of what it is shown: the verdict on the
revision, what the request carries (the explanation's reasoning, its statements of the answer
hidden; never the key, never the stated answer), the order (after every ready explanation,
in a real ``runconsumer --drain``), and which revision a check is for."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.explanations import (
    check_cost,
    edits,
    flag_trust,
    key_audit,
    prompt_versions,
    verifier,
)
from studyqueue.models import (
    ExplanationRevision,
    JobAttempt,
    JobKind,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
    revision_to_verify,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.pauses import pause, resume
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory
from tests.helpers.admin import DASHBOARD_URL
from tests.helpers.metrics import samples
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = ["Busan", "Seoul", "Incheon"]
# What the explanation's writer replies: reasoning, then the answer line the prompt asks for.
EXPLANATION = "Seoul has been the capital since 1394, when the Joseon court moved there.\n정답: ②"


def question(spec: str = "2", **fields) -> StudyQuestion:  # type: ignore[no-untyped-def]
    fields.setdefault("choices", CHOICES)
    fields.setdefault("answer", "Seoul")
    text = fields.pop("text", None) or f"Which city is the capital of Korea? VERIFY:{spec}"
    return StudyQuestionFactory(text=text, **fields)


def drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


def kind_of(body: dict) -> str:
    system = body["messages"][0]["content"]
    return {key_audit.SYSTEM: "audit", verifier.SYSTEM: "verify"}.get(system, "explanation")


@pytest.fixture
def server(llm_server: LLMServer, settings) -> LLMServer:
    # The step check has tests of its own (test_step_check.py): not run beside these.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": False, "STEP_CHECK": False}
    llm_server.answer = EXPLANATION
    return llm_server


@pytest.mark.parametrize(
    ("spec", "answer", "flags"),
    [
        ("2", 2, []),  # the reasoning supports the key
        ("3", 3, ["verifier_disagrees"]),  # it argues for another choice
        ("x", None, ["verifier_unsure"]),  # it names none: never read as the key
    ],
)
def test_the_verdict_is_kept_on_the_revision(server, spec, answer, flags):
    q = question(spec)
    enqueue(q)
    drain()
    q.refresh_from_db()
    revision = q.current_revision
    assert (revision.verifier_answer, revision.flags) == (answer, flags)
    assert revision.verified_at is not None
    assert revision.verifier_reply == ("I cannot tell." if spec == "x" else f"Answer: {spec}")
    assert q.explanation_flags == flags  # the admin's filters read the question's
    job = StudyQuestionJob.objects.get(kind="verification")
    assert (job.status, job.attempts, job.revision_id) == ("completed", 1, revision.pk)
    # What checking cost is on the attempt, as for any call.
    attempt = JobAttempt.objects.get(job=job)
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (42, 7)


def test_the_request_hides_the_answer_line_and_never_carries_the_key(server):
    q = question("2")
    enqueue(q)
    drain()
    bodies = [body for body in server.bodies if kind_of(body) == "verify"]
    assert len(bodies) == 1
    body = bodies[0]
    assert body["messages"][-1]["content"] == (
        "Question:\nWhich city is the capital of Korea? VERIFY:2\n\n"
        "Choices:\n1. Busan\n2. Seoul\n3. Incheon\n\n"
        "Explanation:\nSeoul has been the capital since 1394, when the Joseon court moved there."
    )
    sent = json.dumps(body["messages"], ensure_ascii=False)
    assert "정답" not in sent and "②" not in sent  # the stated answer is hidden
    assert "Correct answer" not in sent  # the explanation's prompt carries the key; not this
    assert "seed" not in body
    assert body["max_tokens"] <= 16
    assert body["temperature"] == 0
    assert q.content_hash()  # the question itself is unchanged by the check
    explanation = [b for b in server.bodies if kind_of(b) == "explanation"]
    assert "Correct answer: Seoul" in explanation[0]["messages"][-1]["content"]


def test_checks_start_only_when_no_explanation_is_ready(server, settings):
    """Five questions, claimed two at a time: every verification is claimed after the last
    explanation (a check never takes a place an explanation could have). The gate is first
    come, first served: a check claimed after the last explanation may still reach the server
    before it, while that explanation renders its prompt."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BATCH_SIZE": 2}
    for n in range(5):
        enqueue(question("2", text=f"Capital of Korea, take {n}? VERIFY:2"))
    drain()
    kinds = [kind_of(body) for body in server.bodies]
    assert sorted(kinds) == ["explanation"] * 5 + ["verify"] * 5
    claimed = StudyQuestionJob.objects.order_by("started_at", "pk").values_list("kind", flat=True)
    assert list(claimed) == [JobKind.EXPLANATION] * 5 + [JobKind.VERIFICATION] * 5
    assert ExplanationRevision.objects.filter(verified_at__isnull=False).count() == 5


def test_the_claim_takes_a_check_only_when_no_explanation_is_ready():
    checked, written = question(), question(text="Another")
    verification = enqueue(checked, "verification").job
    explanation = enqueue(written).job
    (first,) = transitions.claim(worker_id="w", limit=1)
    assert first.pk == explanation.pk  # queued later, claimed first
    transitions.release(first, message="handed back")
    both = transitions.claim(worker_id="w", limit=10)
    assert [job.pk for job in both] == [explanation.pk, verification.pk]
    StudyQuestionJob.objects.update(status="pending", claim_token=None)
    QueuePause.objects.create(kind="explanation")
    # A paused explanation is not ready: the check runs.
    assert [job.pk for job in transitions.claim(worker_id="w", limit=1)] == [verification.pk]


def test_no_check_without_choices_or_key_or_with_verify_off(server, settings):
    enqueue(StudyQuestionFactory(text="Open question", choices=[], answer=""))
    enqueue(question(text="No key VERIFY:2", answer=""))
    drain()
    assert not StudyQuestionJob.objects.filter(kind="verification").exists()
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "VERIFY": False}
    enqueue(question())
    drain()
    assert not StudyQuestionJob.objects.filter(kind="verification").exists()
    assert ExplanationRevision.objects.count() == 3


def test_an_explanation_outdated_before_its_check_is_not_checked(server):
    q = question("3")
    enqueue(q)
    pause("verification")  # the explanation is written; its check waits
    drain()
    q.refresh_from_db()
    q.answer = "Busan"  # the key changes: the explanation is outdated
    with edits.editing([q.pk]):
        q.save()
    resume("verification")
    drain()
    job = StudyQuestionJob.objects.get(kind="verification")
    assert (job.status, job.error_code) == ("skipped", "nothing_to_verify")
    q.refresh_from_db()
    assert q.current_revision.verified_at is None


def test_which_revision_a_check_is_for():
    q = question()
    old = ExplanationRevisionFactory(question=q)
    current = ExplanationRevisionFactory(question=q)
    StudyQuestion.objects.filter(pk=q.pk).update(current_revision=current)
    q.refresh_from_db()
    assert revision_to_verify(q) == current  # the older one is no longer shown
    candidate = ExplanationRevisionFactory(question=q, candidate=True)
    assert revision_to_verify(q) == candidate  # the newest waiting one first
    ExplanationRevision.objects.filter(pk=candidate.pk).update(verified_at="2026-12-01T00:00Z")
    assert revision_to_verify(q) == current
    ExplanationRevisionFactory(question=q, author="reviewer", candidate=True)  # a person's
    assert revision_to_verify(q) == current
    StudyQuestion.objects.filter(pk=q.pk).update(explanation_flags=["question_changed"])
    q.refresh_from_db()
    assert revision_to_verify(q) is None  # outdated: nothing to check it against
    assert old.verified_at is None


def export(*args: str) -> dict[int, dict]:
    out = StringIO()
    call_command("exportexplanations", *args, stdout=out, stderr=StringIO())
    return {row["id"]: row for row in map(json.loads, out.getvalue().splitlines())}


def test_the_export_carries_the_checks_and_says_what_a_missing_one_waits_on(server, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": True, "KEY_AUDIT_HOLDS": True}
    checked = question("3", text="Capital of Korea? AUDIT:222 VERIFY:3")
    held = question(text="Capital of Korea, held? AUDIT:333")
    failed = question(text="Capital of Korea, failing? FAULT:400 AUDIT:222")
    auditing = question(text="Capital of Korea, paused audit?")
    unqueued = question(text="Capital of Korea, not queued?")
    later = question(text="Capital of Korea, later? AUDIT:222")
    call_command("enqueue", "--missing", stdout=StringIO())
    StudyQuestionJob.objects.filter(study_question=later, kind="explanation").update(
        run_after="2999-01-01T00:00Z"
    )
    StudyQuestionJob.objects.filter(study_question=unqueued).delete()
    # The audit of one is paused: it stays queued (an explanation job waits behind it).
    StudyQuestionJob.objects.filter(study_question=auditing, kind="key_audit").update(
        run_after="2999-01-01T00:00Z"
    )
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 1}
    drain()
    rows = export()
    assert list(rows) == [checked.pk]  # by default, explained questions only
    row = rows[checked.pk]
    assert (row["key_audit"], row["verifier_answer"], row["waiting_on"]) == ("agrees", 3, None)
    assert "verifier_disagrees" in row["flags"]
    rows = export("--include-missing")
    assert {pk: row["waiting_on"] for pk, row in rows.items()} == {
        checked.pk: None,
        held.pk: "key_check",
        failed.pk: "failed",
        auditing.pk: "key_audit",
        unqueued.pk: "not_queued",
        later.pk: "queued",
    }
    assert rows[held.pk]["explanation"] is None and rows[held.pk]["key_audit_answer"] == 3
    csv_out = StringIO()
    call_command(
        "exportexplanations", "--include-missing", "--format", "csv", stdout=csv_out,
        stderr=StringIO(),
    )  # fmt: skip
    header = csv_out.getvalue().splitlines()[0]
    assert header.endswith(",tokens_per_second,waiting_on")
    assert ",key_audit,key_audit_answer,verifier_answer," in header


def test_the_dashboard_reports_what_checking_cost_beside_the_explanations(
    server, settings, admin_client
):
    """Key audits (two samples each, settled) and verification, against the explanations' tokens
    and LLM time, under the explanation's prompt version; and the flags' scores, which say
    they have too few decisions."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": True}
    for n in range(2):
        question("2", text=f"Capital of Korea, take {n}? AUDIT:222 VERIFY:3")
    call_command("enqueue", "--missing", stdout=StringIO())
    drain()
    (version,) = prompt_versions.collect()
    cost = check_cost.of(check_cost.collect(), version.prompt_version)
    written, audit, verification = map(cost.of, ("explanation", "key_audit", "verification"))
    # The test server reports 42 prompt and 7 completion tokens per call.
    assert (written.attempts, written.prompt_tokens) == (2, 84)
    # Two samples each: both name the key, so the third could not change the verdict.
    assert (audit.attempts, audit.prompt_tokens, audit.completion_tokens) == (2, 168, 28)
    assert (verification.attempts, verification.completion_tokens) == (2, 14)
    assert (cost.checking.completion_tokens, cost.checking.prompt_tokens) == (42, 252)
    assert cost.token_share == pytest.approx((28 + 14) / 14)  # generated tokens
    trust = flag_trust.of(flag_trust.collect(), version.prompt_version)
    assert {t.flag: t.precision.total for t in trust}["verifier_disagrees"] == 0
    assert flag_trust.key_disputes() == flag_trust.Rate(0, 0)
    page = admin_client.get(DASHBOARD_URL).content.decode()
    assert '<td class="num sq-checking">42 (300 %, ' in page
    disputes = page.split('<tr data-flag="key_disputes">', 1)[1].split("</tr>", 1)[0]
    assert "too few decisions (0/0)" in disputes


def test_the_metrics_count_checking_tokens_apart_from_the_explanations(server, admin_client):
    enqueue(question("3"))
    drain()
    got = samples(admin_client.get("/studyqueue/metrics").content.decode())
    by_kind = "studyqueue_llm_tokens_by_kind_24h"
    assert got[(by_kind, (("kind", "explanation"), ("type", "prompt")))] == 42
    assert got[(by_kind, (("kind", "verification"), ("type", "completion")))] == 7
    # The revision's own reply, once: the check that points at it adds nothing there.
    assert got[("studyqueue_llm_tokens_24h", (("type", "prompt"),))] == 42


MINERALS = ["철", "칼슘", "나트륨", "칼륨"]
MINERALS_EN = ["Iron", "Calcium", "Sodium", "Potassium"]


def reading_verifier(prompt: str) -> str:
    """A verifier model that reads what it is shown, and is fooled by what it should not see:
    a sentence that names a choice as the answer (or says to pick it) is taken at its word, as
    a model copying a stated answer would; otherwise it names the one choice the reasoning
    speaks for (named in a sentence that does not rule it out), or none."""
    listed = prompt.split("Choices:\n", 1)[1].split("\n\n", 1)[0]
    choices = re.findall(r"^(\d+)\. (.+)$", listed, re.MULTILINE)
    explanation = prompt.split("Explanation:\n", 1)[1]
    sentences = re.split(r"(?<=[.!?])\s+|\n", explanation)

    def named(sentence: str) -> list[str]:
        marks = {n: chr(0x2460 + int(n) - 1) for n, _ in choices}
        said = sentence.casefold()
        return [n for n, text in choices if text.casefold() in said or marks[n] in sentence]

    stating = re.compile(r"정답|(?<![가-힣])답|answer|correct|맞|고르|pick|choose", re.IGNORECASE)
    for sentence in sentences:
        if stating.search(sentence) and (found := named(sentence)):
            return f"Answer: {found[0]}"
    ruled_out = re.compile(r"아니|않|틀|없|wrong|\bnot\b", re.IGNORECASE)
    spoken_for = {n for s in sentences if not ruled_out.search(s) for n in named(s)}
    return f"Answer: {spoken_for.pop()}" if len(spoken_for) == 1 else "I cannot tell."


@pytest.mark.parametrize(
    ("choices", "explanation", "answer", "flags"),
    [
        # The key stated, the reasoning for ③ (sodium): the verifier sees only the reasoning.
        (MINERALS, "정답은 ②번이다. 나트륨은 뼈와 치아를 단단하게 만드는 주된 무기질이다. 철은 "
         "헤모글로빈의 성분이므로 뼈와 관계가 없다.\n정답: ②", 3, ["verifier_disagrees"]),
        (MINERALS, "②번이 정답인 이유를 살펴보자.\n나트륨은 뼈와 치아를 이루는 주된 무기질이다.\n"
         "정답: ②", 3, ["verifier_disagrees"]),
        (MINERALS, "뼈와 치아를 이루는 주된 무기질은 나트륨이므로 칼슘을 고르면 된다.\n정답: ②", 3,
         ["verifier_disagrees"]),
        (MINERALS, "**정답**\n\n---\n\n②\n\n나트륨은 뼈와 치아를 이루는 주된 무기질이다.\n"
         "정답: ②", 3, ["verifier_disagrees"]),
        (MINERALS_EN, "Option B is correct because sodium is the main mineral of bones and "
         "teeth.\nAnswer: 2", 3, ["verifier_disagrees"]),
        # Sound explanations: their reasoning speaks for the key.
        (MINERALS, "정답은 ②번이다. 칼슘은 뼈와 치아의 주성분이다. 철은 헤모글로빈의 성분이므로 "
         "뼈의 주성분이 아니다.\n정답: ②", 2, []),
        (MINERALS_EN, "Option B is correct because calcium phosphate makes up most of bone. "
         "Iron is not part of bone.\nAnswer: 2", 2, []),
    ],
)  # fmt: skip
def test_the_verifier_judges_the_reasoning_not_the_stated_answer(
    server, choices, explanation, answer, flags
):
    server.answer = explanation
    server.verify_reader = reading_verifier
    korean = choices == MINERALS
    text = "뼈와 치아의 주성분인 무기질은?" if korean else "Which mineral is the main one in bone?"
    q = question(text=text, choices=choices, answer=choices[1])
    enqueue(q)
    drain()
    q.refresh_from_db()
    revision = q.current_revision
    assert (revision.verifier_answer, revision.flags) == (answer, flags)
    (body,) = [body for body in server.bodies if kind_of(body) == "verify"]
    sent = body["messages"][-1]["content"].split("Explanation:\n", 1)[1]
    assert "정답" not in sent and "②" not in sent and "correct" not in sent, sent


def test_an_explanation_with_nothing_but_its_answer_is_unsure_without_a_call(server):
    server.answer = "정답은 ②번 칼슘이다. 따라서 이 문제에서는 ②번을 고르면 된다.\n정답: ②"
    q = question(text="뼈와 치아의 주성분인 무기질은?", choices=MINERALS, answer="칼슘")
    enqueue(q)
    drain()
    q.refresh_from_db()
    revision = q.current_revision
    assert (revision.verifier_answer, revision.flags) == (None, ["verifier_unsure"])
    assert revision.verifier_reply == (
        "not asked: nothing of the reasoning is left once its answer is hidden"
    )
    assert [kind_of(body) for body in server.bodies] == ["explanation"]  # no verifier call
    job = StudyQuestionJob.objects.get(kind="verification")
    assert (job.status, job.attempts) == ("completed", 1)
    attempt = JobAttempt.objects.get(job=job)
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (None, None)
