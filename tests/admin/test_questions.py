"""The question admin: list, filters, search, escaping, capped long texts, choices edited
one per line, hostile input."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse

from studyqueue.models import StudyQuestion, StudyQuestionJob
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers.admin import (
    JOBS_URL,
    QUESTIONS_URL,
)

pytestmark = pytest.mark.django_db


# --------------------------------------------------------------------------- questions


def test_question_list_filter_latest_job_and_enqueue_action(admin_client):
    explained = StudyQuestionFactory(explanation="done")
    waiting = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=waiting, status="failed")
    response = admin_client.get(f"{QUESTIONS_URL}?explanation=missing")
    assert [q.pk for q in response.context["cl"].result_list] == [waiting.pk]
    assert "Failed" in response.content.decode()
    response = admin_client.get(f"{QUESTIONS_URL}?explanation=outdated")  # another version
    assert [q.pk for q in response.context["cl"].result_list] == [explained.pk]

    fresh = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=fresh)  # already queued
    response = admin_client.post(
        QUESTIONS_URL,
        {"action": "regenerate_explanation", "_selected_action": [waiting.pk, fresh.pk]},
        follow=True,
    )
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Queued 1 explanation job(s); 1 already queued."]
    assert StudyQuestionJob.objects.filter(study_question=waiting, status="pending").count() == 1


def test_question_page_shows_jobs_inline_and_escapes_the_explanation(admin_client):
    question = StudyQuestionFactory(explanation="<script>evil()</script>")
    job = StudyQuestionJobFactory(study_question=question, status="completed")
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    html = admin_client.get(url).content.decode()
    assert reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]) in html
    assert "<script>evil()</script>" not in html
    assert "&lt;script&gt;evil()&lt;/script&gt;" in html
    assert StudyQuestion.objects.get(pk=question.pk).explanation == "<script>evil()</script>"


def test_the_external_id_is_listed_shown_and_found(admin_client):
    """The id an import gave a question: in its list cell, on its page, and a search for it
    finds it (and only it: not geo-10)."""
    question = StudyQuestionFactory(text="Where is Seoul?", external_id="geo-1")
    StudyQuestionFactory(text="Where is Busan?", external_id="geo-10")
    response = admin_client.get(QUESTIONS_URL, {"q": "geo-1"})
    assert [q.pk for q in response.context["cl"].result_list] == [question.pk]
    assert '<div class="sq-sub">geo-1</div>' in response.content.decode()
    page = admin_client.get(reverse("admin:studyqueue_studyquestion_change", args=[question.pk]))
    assert '<div class="readonly">geo-1</div>' in page.content.decode()


@pytest.mark.parametrize("term", ["²", "٣", "99999999999999999999", "#", "🙂", "-1"])
def test_any_unicode_search_term_works(admin_client, term):
    StudyQuestionJobFactory(study_question__text=f"about {term}")
    response = admin_client.get(JOBS_URL, {"q": term})
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 1  # found as text


def test_long_texts_are_capped_on_pages_with_the_full_text_behind_a_link(admin_client):
    from studyqueue.admin.common import LONG_TEXT_SHOWN

    long_text = "word " * 100_000  # 500,000 characters
    question = StudyQuestionFactory(explanation=long_text)
    job = StudyQuestionJobFactory(study_question=question, status="completed")
    full = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
    for url in (
        reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
        reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]),
    ):
        html = admin_client.get(url).content.decode()
        assert len(html) < LONG_TEXT_SHOWN + 100_000, url
        assert f'href="{full}"' in html and "more characters not shown" in html
    response = admin_client.get(full)
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == long_text


def test_the_full_text_view_needs_view_permission(client):
    question = StudyQuestionFactory(explanation="secret-ish")
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(staff)
    url = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_studyquestion"))
    assert client.get(url).status_code == 200


def test_lists_do_not_read_the_long_columns(admin_client):
    question = StudyQuestionFactory(explanation="x" * 10_000)
    StudyQuestionJobFactory(study_question=question)
    (job,) = admin_client.get(JOBS_URL).context["cl"].result_list
    assert "error_message" in job.get_deferred_fields()
    assert {"text", "explanation"} <= job.study_question.get_deferred_fields()
    (row,) = admin_client.get(QUESTIONS_URL).context["cl"].result_list
    assert {"text", "explanation", "choices"} <= row.get_deferred_fields()


def _question_form(question: StudyQuestion, choices: str) -> dict[str, str]:
    return {
        "text": question.text,
        "choices": choices,
        "answer": question.answer,
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
    }


@pytest.mark.parametrize(
    "typed,stored",
    [
        ("Paris\nRome\n\n  Berlin  \n", ["Paris", "Rome", "Berlin"]),
        ("", []),
        ("null", ["null"]),
        ("42\ntrue", ["42", "true"]),
    ],
)
def test_choices_are_edited_one_per_line(admin_client, typed, stored):
    question = StudyQuestionFactory(choices=["old"])
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    form_page = admin_client.get(url).content.decode()
    assert "\nold</textarea>" in form_page
    response = admin_client.post(url, _question_form(question, typed))
    assert response.status_code == 302, response.content.decode()[:2000]
    question.refresh_from_db()
    assert question.choices == stored


@pytest.mark.parametrize("field", ["text", "choices", "answer"])
@pytest.mark.parametrize("page", ["add", "change"])
def test_a_nul_in_any_question_field_is_a_form_error(admin_client, field, page):
    # PostgreSQL holds no NUL in text, nor as an escape in JSON: a form error, never a 500.
    question = StudyQuestionFactory(text="Capital of France?", choices=["Paris", "Rome"])
    if page == "add":
        url = reverse("admin:studyqueue_studyquestion_add")
    else:
        url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    data = _question_form(question, "Paris\nRome")
    data[field] = "Ber\x00lin"
    response = admin_client.post(url, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert StudyQuestion.objects.count() == 1
    question.refresh_from_db()
    assert (question.text, question.choices) == ("Capital of France?", ["Paris", "Rome"])


def test_a_choice_with_a_nul_names_the_choice(admin_client):
    question = StudyQuestionFactory()
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    response = admin_client.post(url, _question_form(question, "Paris\nRo\x00me"))
    assert response.context["adminform"].form.errors["choices"] == [
        "Choice 2 holds a character that cannot be stored (a NUL or a lone surrogate)."
    ]


@pytest.mark.parametrize(
    "model", ["studyquestionjob", "studyquestion", "explanationrevision", "queuepause"]
)
def test_a_nul_in_a_list_filter_or_search_is_no_server_error(admin_client, model):
    StudyQuestionJobFactory(status="failed")
    url = reverse(f"admin:studyqueue_{model}_changelist")
    params = ("q", "status", "kind", "error_code", "prompt_version", "finish_reason", "review")
    for param in params:
        response = admin_client.get(url, {param: "a\x00"})
        # The admin's own answer to parameters it cannot use: its list, flagged ?e=1.
        assert (response.status_code, response.url) == (302, url + "?e=1"), param


@pytest.mark.parametrize("selected", ["1\x00", "abc", str(2**63), "-1"])
def test_a_crafted_selection_is_refused_with_a_message(admin_client, selected):
    job = StudyQuestionJobFactory(status="failed")
    response = admin_client.post(
        JOBS_URL, {"action": "retry_jobs", "_selected_action": [str(job.pk), selected]}, follow=True
    )
    assert response.status_code == 200
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "The selection holds something that is not an id; nothing was changed."
    ]
    assert StudyQuestionJob.objects.get(pk=job.pk).status == "failed"


@pytest.mark.parametrize("value", [None, 42, True, "Paris", {"a": "b"}, ["ok", 3], ["ok", " "]])
def test_the_model_refuses_choices_that_are_not_a_list_of_strings(value):
    from django.core.exceptions import ValidationError

    question = StudyQuestionFactory.build(choices=value)
    with pytest.raises(ValidationError) as info:
        question.full_clean()
    assert "choices" in info.value.message_dict


def test_the_outdated_filter_follows_the_live_consumers_and_says_so(admin_client):
    from tests.factories import QueueConsumerFactory

    theirs = StudyQuestionFactory(explanation="x", explanation_prompt_version="aaaaaaaaaaaa")
    other = StudyQuestionFactory(explanation="y", explanation_prompt_version="bbbbbbbbbbbb")
    QueueConsumerFactory(prompt_version="aaaaaaaaaaaa", prompt_label="qwen · aaaaaaa")
    response = admin_client.get(QUESTIONS_URL, {"explanation": "outdated"})
    assert [q.pk for q in response.context["cl"].result_list] == [other.pk]
    said = [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]
    assert said[0] == (
        "info",
        "Outdated against prompt version qwen · aaaaaaa, used by 1 live consumer.",
    )
    assert said[1][0] == "warning" and "differs from the live consumers'" in said[1][1]
    response = admin_client.get(QUESTIONS_URL, {"explanation": "current"})
    assert [q.pk for q in response.context["cl"].result_list] == [theirs.pk]
    page = admin_client.get(reverse("admin:studyqueue_studyquestion_change", args=[other.pk]))
    assert "(outdated: the prompt changed since)" in page.content.decode()
