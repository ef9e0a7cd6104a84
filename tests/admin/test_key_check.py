"""The review queue's key check: a disputed key goes first, with the question, the key and
what each sample answered; keep the key or take the model's choice (logged, one decision per
dispute, through the question's save); the question list's key audit filter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import translation

from studyqueue.explanations import revisions
from studyqueue.models import ExplanationRevision, StudyQuestion
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db

REVIEW_URL = reverse("admin:studyqueue_explanationreview_changelist")
KEY_CHECK_URL = reverse("admin:studyqueue_explanationreview_keycheck")
QUESTIONS_URL = reverse("admin:studyqueue_studyquestion_changelist")
SAMPLES = [{"answer": 3, "reply": "Answer: 3"}] * 3


@pytest.fixture(autouse=True)
def _no_language_left() -> Iterator[None]:
    yield
    translation.deactivate()


def disputed(**fields) -> StudyQuestion:  # type: ignore[no-untyped-def]
    question = StudyQuestionFactory(
        text="Which city is the capital of Korea?",
        choices=["Busan", "Seoul", "Incheon"],
        answer="Seoul",
        **fields,
    )
    StudyQuestion.objects.filter(pk=question.pk).update(
        key_audit="disputed", key_audit_answer=3, key_audit_samples=SAMPLES
    )
    question.refresh_from_db()
    return question


def explained() -> StudyQuestion:
    revision = ExplanationRevisionFactory(question=StudyQuestionFactory(), text="Because.")
    revisions.make_current(revision)
    return StudyQuestion.objects.get(pk=revision.question_id)


def form(question: StudyQuestion, decision: str) -> dict[str, object]:
    return {"question": question.pk, "seen": question.content_hash(), "decision": decision}


def test_a_disputed_key_goes_first_with_what_each_sample_answered(admin_client):
    explained()
    question = disputed()
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-key-check"' in page and f'data-question="{question.pk}"' in page
    assert "Which city is the capital of Korea?" in page
    assert 'id="sq-key-check-key">Seoul<' in page
    assert 'id="sq-key-check-model">3 (Incheon)<' in page
    assert page.count("<li>3 (Incheon) <code>Answer: 3</code></li>") == 3
    assert 'id="sq-key-keep"' in page and 'id="sq-key-take"' in page
    assert reverse("admin:studyqueue_studyquestion_change", args=[question.pk]) in page
    # Once decided, the explanations come next.
    admin_client.post(KEY_CHECK_URL, form(question, "keep"))
    assert 'id="sq-review"' in admin_client.get(REVIEW_URL).content.decode()


def test_keeping_the_key_records_the_decision_and_logs_it(admin_client):
    question = disputed()
    response = admin_client.post(KEY_CHECK_URL, form(question, "keep"))
    assert response.status_code == 302
    question.refresh_from_db()
    decided = (question.key_check, question.key_check_by, question.answer)
    assert decided == ("kept", "admin", "Seoul")
    assert question.key_check_at is not None
    assert LogEntry.objects.get().change_message == "Key check: the key Seoul kept"
    # A second decision on the same dispute is refused and changes nothing.
    admin_client.post(KEY_CHECK_URL, form(question, "take"))
    question.refresh_from_db()
    assert (question.key_check, question.answer) == ("kept", "Seoul")


def test_taking_the_models_choice_saves_the_question_and_voids_its_approval(admin_client):
    question = disputed()
    revision = ExplanationRevisionFactory(question=question, text="Seoul, because.")
    revisions.make_current(revision)
    ExplanationRevision.objects.filter(pk=revision.pk).update(review_status="approved")
    admin_client.post(KEY_CHECK_URL, form(question, "take"))
    question.refresh_from_db()
    assert (question.answer, question.key_check, question.key_audit) == (
        "Incheon",
        "changed",
        "agrees",
    )
    assert ExplanationRevision.objects.get().review_status == "unreviewed"
    assert "question_changed" in question.explanation_flags


def test_a_page_overtaken_by_an_edit_decides_nothing(admin_client):
    question = disputed()
    seen = form(question, "take")
    question.text = "Which city is the capital of Korea, really?"
    question.save()  # clears the audit: no dispute left
    admin_client.post(KEY_CHECK_URL, seen)
    question.refresh_from_db()
    assert (question.answer, question.key_check) == ("Seoul", "")


def test_the_key_check_page_in_korean(admin_client):
    question = disputed()
    page = admin_client.get(
        REVIEW_URL + f"?key_check={question.pk}", HTTP_ACCEPT_LANGUAGE="ko"
    ).content.decode()
    assert "정답 유지" in page and "모델이 고른 보기로 변경" in page


def test_the_question_list_filters_by_key_audit(admin_client):
    waiting = disputed()
    kept = disputed(external_id="kept")
    StudyQuestion.objects.filter(pk=kept.pk).update(key_check="kept")
    agreed = StudyQuestionFactory()
    StudyQuestion.objects.filter(pk=agreed.pk).update(key_audit="agrees")
    never = StudyQuestionFactory()

    def listed(value: str) -> set[int]:
        response = admin_client.get(QUESTIONS_URL, {"key_audit": value})
        return {row.pk for row in response.context["cl"].result_list}

    assert listed("disputed") == {waiting.pk, kept.pk}
    assert listed("key_check") == {waiting.pk}
    assert listed("agrees") == {agreed.pk}
    assert listed("none") == {never.pk}


def test_the_pages_report_the_dispute_rate_and_the_disputes_upheld(admin_client):
    changed, kept, _ = disputed(), disputed(external_id="b"), disputed(external_id="c")
    admin_client.post(KEY_CHECK_URL, form(changed, "take"))
    admin_client.post(KEY_CHECK_URL, form(kept, "keep"))
    agreed = StudyQuestionFactory()
    StudyQuestion.objects.filter(pk=agreed.pk).update(key_audit="agrees")
    line = (
        "Key audit: 4 questions audited, 3 disputed (75.0%); reviewers upheld 1 disputes "
        "(the key changed) and kept the key in 1."
    )
    assert line in admin_client.get(REVIEW_URL).content.decode()  # the key check page
    admin_client.post(KEY_CHECK_URL, form(StudyQuestion.objects.get(external_id="c"), "keep"))
    assert 'id="sq-key-audit-rates"' in admin_client.get(REVIEW_URL).content.decode()
