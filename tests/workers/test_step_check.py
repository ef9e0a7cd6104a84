"""The step check (``workers/step_check.py``, ``explanations/step_check.py``) against the test
LLM server, whose step checker here reads the numbered sentences it is shown and names the
false one in the words a model uses: the verdict and the sentence on the revision, what the
request carries (the key as the reference, every sentence numbered), when it is queued, the
setting, a question edited during the check, the export and what checking costs."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.consumer.consumer import Consumer
from studyqueue.explanations import check_cost, edits, prompt_versions, step_check
from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.pauses import pause, resume
from studyqueue.queue.transitions import Outcome
from studyqueue.workers import step_check as step_worker
from tests.factories import StudyQuestionFactory
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

MINERALS = ["철", "칼슘", "나트륨", "칼륨"]
FALSE = "칼슘은 주로 혈액 속 헤모글로빈을 만든다."  # iron's work, not calcium's
SOUND = (
    "뼈와 치아의 단단한 부분은 인산칼슘으로 이루어진다. 칼슘은 인산과 결합해 뼈를 만든다.\n"
    "- ① 철: 헤모글로빈의 성분이다.\n"
    "따라서 정답은 ② 칼슘이다."
)
# The same explanation with its second sentence false: it still reaches the key.
WRONG = SOUND.replace("칼슘은 인산과 결합해 뼈를 만든다.", FALSE)


def question(**fields) -> StudyQuestion:  # type: ignore[no-untyped-def]
    fields.setdefault("text", "뼈와 치아의 주성분인 무기질은?")
    return StudyQuestionFactory(choices=MINERALS, answer="칼슘", **fields)


def drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


def numbered(prompt: str) -> dict[int, str]:
    explanation = prompt.split("Explanation:\n", 1)[1]
    return {int(n): s for n, s in re.findall(r"^\[(\d+)\] (.+)$", explanation, re.MULTILINE)}


def checker(wording: str) -> Callable[[str], str]:
    """A step checker that finds ``FALSE`` among the numbered sentences and names its number
    in ``wording`` ("{n}"), or says ``틀린 문장이 없습니다.``."""

    def reply(prompt: str) -> str:
        found = [n for n, sentence in numbered(prompt).items() if sentence == FALSE]
        return wording.format(n=found[0]) if found else "틀린 문장이 없습니다."

    return reply


@pytest.fixture
def server(llm_server: LLMServer, settings) -> LLMServer:
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": False, "VERIFY": False}
    llm_server.answer = WRONG
    llm_server.step_reader = checker("Step: {n}")
    return llm_server


def step_bodies(server: LLMServer) -> list[dict]:
    return [b for b in server.bodies if b["messages"][0]["content"] == step_check.SYSTEM]


@pytest.mark.parametrize(
    "wording",
    ["Step: {n}", "{n}", "[{n}]", "{n}번 문장이 틀렸습니다", "The error is in sentence {n}.",
     "**First wrong step: {n}** — it names iron's work.", "오류: {n}"],
)  # fmt: skip
def test_a_false_sentence_is_named_whatever_the_wording(server, wording):
    server.step_reader = checker(wording)
    q = question()
    enqueue(q)
    drain()
    q.refresh_from_db()
    revision = q.current_revision
    assert (revision.step_check, revision.wrong_step) == ("wrong_step", 2)
    assert revision.wrong_step_text == FALSE
    assert revision.step_check_reply == checker(wording)(
        step_bodies(server)[0]["messages"][1]["content"]
    )
    assert revision.flags == q.explanation_flags == ["wrong_step"]
    job = StudyQuestionJob.objects.get(kind="step_check")
    assert (job.status, job.attempts, job.revision_id) == ("completed", 1, revision.pk)


def test_a_sound_explanation_is_ok(server):
    server.answer = SOUND
    q = question()
    enqueue(q)
    drain()
    revision = ExplanationRevision.objects.get()
    assert (revision.step_check, revision.wrong_step, revision.wrong_step_text) == ("ok", None, "")
    assert revision.step_check_reply == "틀린 문장이 없습니다."
    assert revision.flags == []


@pytest.mark.parametrize("reply", ["I cannot tell.", "2 or 3", "Step: 9", "none, except 2"])
def test_an_unreadable_reply_is_unsure_never_ok(server, reply):
    server.step_reader = None
    server.step_answer = reply
    q = question()
    enqueue(q)
    drain()
    q.refresh_from_db()
    revision = q.current_revision
    assert (revision.step_check, revision.wrong_step, revision.wrong_step_text) == (
        "unsure", None, "",
    )  # fmt: skip
    assert revision.flags == q.explanation_flags == ["step_check_unsure"]


def test_the_request_shows_the_key_and_every_sentence_numbered(server):
    enqueue(question())
    drain()
    (body,) = step_bodies(server)
    prompt = body["messages"][-1]["content"]
    assert "Reference answer: 2. 칼슘\n" in prompt  # the key, as the reference
    assert numbered(prompt) == {
        1: "뼈와 치아의 단단한 부분은 인산칼슘으로 이루어진다.",
        2: FALSE,
        3: "① 철: 헤모글로빈의 성분이다.",
        4: "따라서 정답은 ② 칼슘이다.",  # nothing hidden: the answer line too
    }
    assert prompt.startswith("Question:\n뼈와 치아의 주성분인 무기질은?\n\nChoices:\n1. 철\n")
    assert body["messages"][0]["role"] == "system"  # the fixed text first: the prompt cache
    assert body["max_tokens"] <= 16 and body["temperature"] == 0 and "seed" not in body


def test_queued_after_each_explanation_and_claimed_after_every_explanation(server, settings):
    """Every step check is claimed after the last explanation (checking never slows the
    writing). The gate is first come, first served: a check claimed after the last
    explanation may still reach the server before it, while that explanation renders its
    prompt, so the claims' order is asserted, not the server's."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "BATCH_SIZE": 2}
    for n in range(3):
        enqueue(question(text=f"뼈와 치아의 주성분인 무기질은? ({n})"))
    drain()
    kinds = ["step" if b in step_bodies(server) else "explanation" for b in server.bodies]
    assert sorted(kinds) == ["explanation"] * 3 + ["step"] * 3
    claimed = StudyQuestionJob.objects.order_by("started_at", "pk").values_list("kind", flat=True)
    assert list(claimed) == ["explanation"] * 3 + ["step_check"] * 3
    assert ExplanationRevision.objects.filter(step_check="wrong_step").count() == 3
    job = StudyQuestionJob.objects.filter(kind="step_check").first()
    assert job is not None and job.priority == 1


def test_no_step_check_with_the_setting_off_or_without_a_key(server, settings):
    enqueue(StudyQuestionFactory(text="Open question", choices=[], answer=""))
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "STEP_CHECK": False}
    enqueue(question())
    drain()
    assert not StudyQuestionJob.objects.filter(kind="step_check").exists()
    assert step_bodies(server) == []
    # A job queued before the setting was turned off ends skipped, with no call.
    q = question(text="다시 묻는다: 뼈의 주성분은?")
    enqueue(q)
    pause("step_check")
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "STEP_CHECK": True}
    drain()
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "STEP_CHECK": False}
    resume("step_check")
    drain()
    job = StudyQuestionJob.objects.get(kind="step_check")
    assert (job.status, job.error_code) == ("skipped", "nothing_to_verify")
    assert step_bodies(server) == []
    assert ExplanationRevision.objects.filter(step_check="").count() == 3


def test_a_question_edited_during_the_check_keeps_nothing(server, make_consumer):
    q = question()
    enqueue(q)
    pause("step_check")
    drain()  # the explanation is written; its step check waits
    resume("step_check")
    consumer: Consumer = make_consumer()
    (job,) = transitions.claim(worker_id=consumer.worker_id, limit=1)
    result = asyncio.run(step_worker.run(job, consumer.ctx))  # the model names sentence 2
    assert isinstance(result, step_check.StepChecked) and result.step == 2
    q.refresh_from_db()
    q.text = "뼈의 주성분인 무기질은 무엇인가?"
    with edits.editing([q.pk]):
        q.save()
    assert asyncio.run(consumer.store.finish(job, result)) in (Outcome.RELEASED, Outcome.RETRYING)
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("pending", "question_changed")
    revision = ExplanationRevision.objects.get()
    assert (revision.step_check, revision.wrong_step, revision.flags) == ("", None, [])


def test_the_export_and_the_cost_carry_the_step_check(server):
    q = question()
    enqueue(q)
    drain()
    out = StringIO()
    call_command("exportexplanations", stdout=out, stderr=StringIO())
    (row,) = map(json.loads, out.getvalue().splitlines())
    assert (row["step_check"], row["wrong_step"], row["wrong_step_text"]) == (
        "wrong_step", 2, FALSE,
    )  # fmt: skip
    out = StringIO()
    call_command("exportexplanations", "--format", "csv", stdout=out, stderr=StringIO())
    assert ",verifier_answer,step_check,wrong_step,wrong_step_text," in out.getvalue()
    (version,) = prompt_versions.collect()
    cost = check_cost.of(check_cost.collect(), version.prompt_version)
    # The test server reports 7 completion tokens per call: one explanation, one step check.
    assert cost.of("step_check").attempts == 1
    assert cost.token_share == pytest.approx(7 / 7)


def test_a_set_is_done_only_when_its_step_checks_ended(server):
    from studyqueue.sets import question_sets

    q = question()
    question_set, _ = question_sets.add("step quiz", [q.pk])
    enqueue(q)
    pause("step_check")
    drain()
    waiting = question_sets.progress(question_set)
    assert (waiting.explained, waiting.checking, waiting.done) == (1, 1, False)
    resume("step_check")
    drain()
    assert question_sets.progress(question_set).done


def test_a_drain_of_an_imported_file_with_every_check_on(server, settings, tmp_path):
    """``importquestions FILE --enqueue`` with the key audit, the verifier and the step check
    on: every explanation is step-checked after it is written, its false sentence named."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "KEY_AUDIT": True, "VERIFY": True}
    path = tmp_path / "questions.jsonl"
    rows = [
        {"external_id": f"m{n}", "text": f"뼈와 치아의 주성분인 무기질은? ({n})",
         "choices": MINERALS, "answer": "칼슘"}
        for n in range(3)
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n")
    call_command("importquestions", str(path), "--enqueue", stdout=StringIO(), stderr=StringIO())
    drain()
    revisions = list(ExplanationRevision.objects.order_by("pk"))
    assert len(revisions) == 3
    for revision in revisions:
        assert (revision.step_check, revision.wrong_step_text) == ("wrong_step", FALSE)
        assert revision.verified_at is not None  # the verifier ran too
    jobs = StudyQuestionJob.objects.order_by("completed_at", "pk")
    kinds = [job.kind for job in jobs]
    assert [kinds.count(kind) for kind in ("key_audit", "explanation", "step_check")] == [3, 3, 3]
    assert set(kinds[-3:]) <= {"step_check", "verification"}  # the checks come last
    assert all(job.status == "completed" for job in jobs)
