"""The test LLM server answers key audits and blind verifications as a sound model would
(``tests/llm_checks.py``): built by the product's own prompts, read by its own reader and
judged by its own verdicts, a correct key agrees and a sound explanation raises no flag; what
it cannot work out it says it cannot (unsure), never a dispute. The fixed reply of a model
that does not read the question stays one knob away."""

from __future__ import annotations

import httpx
import pytest

from studyqueue.explanations import answers, key_audit, revisions, verifier
from studyqueue.models import KeyAudit, StudyQuestion
from tests import llm_checks
from tests.llm_server import ANSWER, FIXED_CHECK, LLMServer

README = {"text": "What is 2 + 2?", "choices": ["3", "4"], "answer": "4"}


def audit(fields: dict) -> tuple[str, key_audit.Verdict]:
    """The audit's reply and the verdict of three such samples."""
    question = StudyQuestion(**fields)
    reply = llm_checks.audit_reply(key_audit.build_messages(question)[-1]["content"])
    sample = answers.choice_named(reply, question.choices)
    key = answers.key_choice(question.answer, question.choices)
    return reply, key_audit.judge([sample] * 3, key)


def verify(fields: dict, explanation: str) -> tuple[int | None, list[str]]:
    """The choice the verifier's reply names and the flags it earns."""
    question = StudyQuestion(**fields)
    blind = verifier.blind(question, explanation)
    assert not blind.problem, blind  # the verifier is asked (else it is unsure at once)
    prompt = verifier.build_messages(question, blind.text)[-1]["content"]
    named = answers.choice_named(llm_checks.verify_reply(prompt), question.choices)
    return named, verifier.judge(named, answers.key_choice(question.answer, question.choices))


def test_the_readme_question_agrees_and_its_explanation_raises_no_flag():
    reply, verdict = audit(README)
    assert reply == "Answer: 2" and verdict == key_audit.Verdict(KeyAudit.AGREES)
    assert verify(README, ANSWER) == (2, [])


@pytest.mark.parametrize(
    ("text", "choices", "answer", "reply"),
    [
        ("What is 3 \u00d7 4?", ["7", "12", "1"], "12", "Answer: 2"),
        ("What is 10 - 2 * 3?", ["4", "24", "16"], "4", "Answer: 1"),
        # "Answer: 2" could be the choice "2": the letter names it alone.
        ("What is 2 + 2?", ["2", "4"], "4", "Answer: B"),
        ("Which of these is Seoul Tower?", ["Seoul", "Seoul Tower"], "Seoul Tower", "Answer: 2"),
    ],
)
def test_the_audit_works_the_answer_out_of_the_question(text, choices, answer, reply):
    said, verdict = audit({"text": text, "choices": choices, "answer": answer})
    assert said == reply and verdict.key_audit == KeyAudit.AGREES


def test_a_wrong_key_is_disputed_with_the_right_choice():
    _, verdict = audit({**README, "answer": "3"})
    assert verdict == key_audit.Verdict(KeyAudit.DISPUTED, 2)


def test_what_it_cannot_work_out_is_unsure_never_disputed():
    fields = {"text": "What is the capital of Korea?", "choices": ["Busan", "Seoul"]}
    reply, verdict = audit({**fields, "answer": "Seoul"})
    assert reply == llm_checks.NONE and verdict.key_audit == KeyAudit.UNSURE
    # An explanation that argues for no choice: unsure, never a disagreement.
    assert verify({**fields, "answer": "Seoul"}, ANSWER) == (None, [revisions.VERIFIER_UNSURE])


CITIES = {"text": "What is the capital of Korea?", "choices": ["Busan", "Seoul"], "answer": "Seoul"}


@pytest.mark.parametrize(
    ("fields", "explanation", "named"),
    [
        (CITIES, "Seoul has been the capital since 1394.\n정답: ②", 2),
        # Several choices weighed: the conclusion, last, decides.
        (CITIES, "Busan is the largest port. But the government sits in Seoul.\nAnswer: 2", 2),
        # The choice in words, or only the arithmetic that comes to it.
        (README, "Two things and two more make four.", 2),
        (README, "Count them: 2 + 2.", 2),
        # An explanation arguing for another choice than the key.
        (CITIES, "Busan is where the government sits.\nAnswer: 2", 1),
    ],
)
def test_the_verifier_names_the_choice_the_reasoning_supports(fields, explanation, named):
    assert verify(fields, explanation)[0] == named


def test_a_fixed_reply_stays_one_knob_away():
    server = LLMServer().start()
    try:
        question = StudyQuestion(**README)

        def reply(messages: list[dict[str, str]]) -> str:
            body = {"model": "m", "messages": messages}
            answer = httpx.post(f"{server.url}/chat/completions", json=body, timeout=10)
            return answer.json()["choices"][0]["message"]["content"]

        audit_messages = key_audit.build_messages(question)
        verify_messages = verifier.build_messages(question, verifier.blind(question, ANSWER).text)
        assert (reply(audit_messages), reply(verify_messages)) == ("Answer: 2", "Answer: 2")
        server.configure(audit_answer=FIXED_CHECK, verify_answer=FIXED_CHECK)
        assert (reply(audit_messages), reply(verify_messages)) == ("Answer: 1", "Answer: 1")
    finally:
        server.stop()
