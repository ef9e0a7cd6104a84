"""Question sets in the admin: the list's bar per set, a set's page, the questions' action
that adds them to a set, and the question and job lists filtered by set (both languages)."""

from __future__ import annotations

import unicodedata
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from studyqueue.models import StudyQuestion, StudyQuestionSet
from studyqueue.sets import question_sets
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)
from tests.helpers.admin import JOBS_URL, QUESTIONS_URL

pytestmark = pytest.mark.django_db

SETS_URL = reverse("admin:studyqueue_studyquestionset_changelist")


def test_the_list_shows_one_bar_per_set_and_a_sets_page_its_states(admin_client):
    explained = StudyQuestionFactory(explanation="Four.")
    waiting = StudyQuestionFactory()
    question_set, _ = question_sets.add("midterm", [explained.pk, waiting.pk])
    question_sets.add("empty", [])
    html = admin_client.get(SETS_URL).content.decode()
    assert html.count('class="sq-set-bar"') == 2
    row = html.split(">midterm</a>")[1].split("</tr>")[0]
    assert 'data-total="2"' in row and 'class="sq-set-plain"' in row and "width:50.00%" in row
    assert '<span data-state="waiting">waiting: 1</span>' in row
    page = admin_client.get(
        reverse("admin:studyqueue_studyquestionset_change", args=[question_set.pk])
    ).content.decode()
    assert "no estimate yet" in page and "not started yet" in page
    korean = admin_client.get(SETS_URL, headers={"accept-language": "ko"}).content.decode()
    assert "대기: 1" in korean


def test_the_questions_action_adds_the_selected_to_the_named_set(admin_client):
    chosen = [StudyQuestionFactory(), StudyQuestionFactory()]
    data = {"action": "add_to_set", "_selected_action": [q.pk for q in chosen]}
    response = admin_client.post(QUESTIONS_URL, {**data, "set_name": " quiz 1 "}, follow=True)
    assert "Question set quiz 1: 2 question(s) added, 2 in all." in response.content.decode()
    assert question_sets.questions(StudyQuestionSet.objects.get(name="quiz 1")).count() == 2
    response = admin_client.post(QUESTIONS_URL, {**data, "set_name": ""}, follow=True)
    assert "Name the question set in the box beside the action." in response.content.decode()


def test_the_question_and_job_lists_filter_by_set(admin_client):
    inside, outside = StudyQuestionFactory(text="inside"), StudyQuestionFactory(text="outside")
    StudyQuestionJobFactory(study_question=inside)
    StudyQuestionJobFactory(study_question=outside)
    question_set, _ = question_sets.add("only", [inside.pk])
    questions = admin_client.get(QUESTIONS_URL, {"sets__id__exact": question_set.pk})
    assert "inside" in questions.content.decode() and "outside" not in questions.content.decode()
    jobs = admin_client.get(JOBS_URL, {"study_question__sets__id__exact": question_set.pk})
    assert "inside" in jobs.content.decode() and "outside" not in jobs.content.decode()


def test_the_action_and_the_sets_form_spell_a_name_as_the_commands_do(admin_client):
    """NFD and NFC are one set; a line break (a mail subject would lose the owner's mail) or
    a name longer than the column is refused with the reason, nothing added or cut."""
    nfc = "기말고사"
    nfd = unicodedata.normalize("NFD", nfc)
    question = StudyQuestionFactory()
    data = {"action": "add_to_set", "_selected_action": [question.pk]}
    response = admin_client.post(QUESTIONS_URL, {**data, "set_name": nfd}, follow=True)
    assert f"Question set {nfc}: 1 question(s) added" in response.content.decode()
    response = admin_client.post(QUESTIONS_URL, {**data, "set_name": "a\nb"}, follow=True)
    assert "cannot hold a line break or control character" in response.content.decode()
    add = reverse("admin:studyqueue_studyquestionset_add")
    response = admin_client.post(add, {"name": f" {nfd} "})
    assert "Question set with this Name already exists." in response.content.decode()
    response = admin_client.post(add, {"name": "final\r\nexam"})
    assert "cannot hold a line break or control character" in response.content.decode()
    response = admin_client.post(add, {"name": "가" * 201})
    assert "at most 200 characters; this one has 201" in response.content.decode()
    # 200 syllables are 600 code points in NFD, and fit once composed.
    response = admin_client.post(add, {"name": unicodedata.normalize("NFD", "가" * 200)})
    assert response.status_code == 302
    assert sorted(StudyQuestionSet.objects.values_list("name", flat=True)) == ["가" * 200, nfc]


def test_the_sets_form_refuses_a_deadline_out_of_range(admin_client, settings):
    """Year 1 in Seoul is no date in UTC: a form error, not a server error."""
    settings.TIME_ZONE = "Asia/Seoul"
    add = reverse("admin:studyqueue_studyquestionset_add")
    for day, time in [("0001-01-01", "03:00:00"), ("9999-12-31", "23:00:00")]:
        response = admin_client.post(add, {"name": day, "deadline_0": day, "deadline_1": time})
        assert response.status_code == 200
        assert "Out of range: too far in the past or the future." in response.content.decode()
    assert not StudyQuestionSet.objects.exists()


def test_the_sets_page_counts_explained_as_setstatus_does(admin_client):
    """Three approved explanations: "explained" is 3 on the page, as in ``setstatus`` (3 of
    3), never the 0 of the bar's explained-only segment."""
    questions = [StudyQuestionFactory(explanation="Four.") for _ in range(3)]
    for question in questions:
        revision = ExplanationRevisionFactory(question=question, review_status="approved")
        StudyQuestion.objects.filter(pk=question.pk).update(current_revision=revision)
    question_set, _ = question_sets.add("approved", [q.pk for q in questions])
    page = admin_client.get(
        reverse("admin:studyqueue_studyquestionset_change", args=[question_set.pk])
    ).content.decode()
    assert '<span data-state="explained">explained: 3</span>' in page
    assert '<span data-state="approved">approved: 3</span>' in page
    assert 'class="sq-set-plain"' not in page  # no segment of width 0
    out = StringIO()
    call_command("setstatus", "approved", stdout=out)
    assert out.getvalue().startswith("approved: 3 of 3 explained (3 approved, 0 flagged)")
