"""The job and question pages read a reply's metadata through its revision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from studyqueue.explanations import revisions
from tests.factories import ExplanationRevisionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db


def _completed_job():  # type: ignore[no-untyped-def]
    reply = ExplanationRevisionFactory(
        model="qwen-7b",
        prompt_label="explanation v3",
        prompt_version="abcdef012345",
        prompt_tokens=321,
        completion_tokens=654,
        first_token_ms=987,
        tokens_per_second=43.5,
        finish_reason="length",
        flags=["truncated"],
        created_at=timezone.now() - timedelta(minutes=3),
    )
    job = StudyQuestionJobFactory(
        study_question=reply.question,
        status="completed",
        completed_at=timezone.now(),
        llm_ms=4321,
        revision=reply,
    )
    reply.job = job
    reply.save()
    assert revisions.make_current(reply)
    return job, reply


def test_the_job_page_shows_its_revisions_metadata(admin_client):
    job, reply = _completed_job()
    url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    html = admin_client.get(url).content.decode()
    for shown in ("qwen-7b", "abcdef012345", "321", "654", "987", "43.5", "4.3s"):
        assert shown in html, shown
    revision_url = reverse("admin:studyqueue_explanationrevision_change", args=[reply.pk])
    assert f'<a href="{revision_url}">#{reply.pk}</a>' in html


def test_counted_tokens_are_marked_on_the_job_and_revision_pages(admin_client):
    job, reply = _completed_job()
    reply.tokens_counted = True
    reply.save()
    for url in (
        reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]),
        reverse("admin:studyqueue_explanationrevision_change", args=[reply.pk]),
    ):
        html = admin_client.get(url).content.decode()
        assert "654 (counted)" in html, url
    reply.tokens_counted = False
    reply.save()
    assert "(counted)" not in admin_client.get(url).content.decode()


def test_a_job_without_a_reply_shows_dashes(admin_client):
    job = StudyQuestionJobFactory(status="failed", error_code="llm_timeout")
    url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    assert admin_client.get(url).status_code == 200


def test_the_question_page_and_list_read_the_current_revision(admin_client):
    job, reply = _completed_job()
    question = job.study_question
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    page = admin_client.get(url)
    html = page.content.decode()
    assert "qwen-7b" in html and "explanation v3" in html
    assert 'data-flag="truncated"' in html, "truncated: the revision ended at max_tokens"
    listed = admin_client.get(reverse("admin:studyqueue_studyquestion_changelist"))
    (row,) = listed.context["cl"].result_list
    assert row.explained_at == reply.created_at
    ordered = admin_client.get(
        reverse("admin:studyqueue_studyquestion_changelist"), {"o": "5"}
    )  # the "explained at" column sorts through the revision
    assert ordered.status_code == 200


def test_the_revision_page_says_candidate_no_in_words_not_a_red_cross(admin_client):
    """ "Not a candidate" is no error: a word, never the admin's red icon for False."""
    _, reply = _completed_job()
    url = reverse("admin:studyqueue_explanationrevision_change", args=[reply.pk])
    html = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "icon-no.svg" not in html
    assert '<div class="readonly">no</div>' in html
