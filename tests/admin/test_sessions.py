"""The study sessions in the admin: the list (score, summary state, flags, outdated; filters
and search; a query count that does not grow with rows), the session's page (answers right
and wrong, the summary and its revisions), regenerate (the list's action and the page's
button, for those who may change sessions) and the review of a summary on its page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from studyqueue.admin.flags import SUMMARY_FLAGS
from studyqueue.explanations import revisions
from studyqueue.models import JobKind, SessionSummary, StudyQuestion, StudyQuestionJob, StudySession
from studyqueue.sessions import recording, summaries
from studyqueue.sets import question_sets
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)
from tests.helpers.admin import staff

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:studyqueue_studysession_changelist")


def page_url(session: StudySession) -> str:
    return reverse("admin:studyqueue_studysession_change", args=[session.pk])


@pytest.fixture
def admin(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture(autouse=True)
def _questions(db: None) -> None:
    """Three questions whose key is choice 1, for every session here."""
    for n in range(3):
        StudyQuestionFactory(external_id=f"q-{n}", choices=["Seoul", "Paris"], answer="1")


def session(
    learner: str = "kim-07", chosen: tuple[int, ...] = (1, 2, 1), **extra: Any
) -> StudySession:
    """A session recorded as importsessions records it: the second answer wrong by default."""
    record = {
        "external_id": f"s-{learner}-{StudySession.objects.count()}",
        "learner": learner,
        "started_at": "2026-12-01T09:00:05+09:00",
        "ended_at": "2026-12-01T09:25:00+09:00",
        "answers": [{"question": f"q-{n}", "chosen": c} for n, c in enumerate(chosen)],
        **extra,
    }
    recorded, _ = recording.record(recording.check(record))
    return recorded


def summarize(recorded: StudySession, text: str) -> SessionSummary:
    checked = summaries.check(text, summaries.answers_of(recorded))
    summary = SessionSummary.objects.create(
        session=recorded, text=text, flags=checked.flags, stated=checked.stated
    )
    summaries.make_current(summary)
    return summary


def said(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_list_shows_learner_local_time_score_state_flags_and_outdated(
    admin: Client, settings: Any
) -> None:
    settings.TIME_ZONE = "Asia/Seoul"
    written = session("kim-07")
    summarize(written, "You got 3/3 right.")  # wrong score, and question 2 never named
    session("lee-02", chosen=(1, 1, 1))
    queued = session("park-11")
    summaries.queue_summaries([queued])
    failed = session("choi-5")
    StudyQuestionJobFactory(
        study_question=None, study_session=failed, kind=JobKind.SESSION_SUMMARY, status="failed"
    )
    StudyQuestion.objects.filter(external_id="q-0").update(answer="2")  # re-keyed since

    html = admin.get(LIST_URL).content.decode()
    for text in (
        "kim-07",
        "lee-02",
        "2/3",
        "3/3",
        "09:00:05",
        "written",
        "failed",
        "none",
        "outdated",
    ):
        assert text in html, text
    assert 'data-flag="score_mismatch"' in html and 'data-flag="missed_not_mentioned"' in html
    assert "The score the summary states is not the session&#x27;s." in html
    # The missed question has no explanation: its summary waits on it.
    assert "waiting on explanations" in html


def test_filters_and_search(admin: Client) -> None:
    question_sets.add("capitals", list(StudyQuestion.objects.values_list("pk", flat=True)))
    kim, lee = session("kim-07"), session("lee-02", set="capitals")
    summarize(kim, "3문제 중 2문제를 맞혔습니다. 2번 문제를 틀렸습니다.")
    summarize(lee, "Well done.")

    def listed(query: str) -> set[str]:
        response = admin.get(f"{LIST_URL}?{query}")
        assert response.status_code == 200
        return {s.learner for s in response.context["cl"].result_list}

    set_id = question_sets.get("capitals").pk
    assert listed("learner=kim-07") == {"kim-07"}
    assert listed(f"question_set__id__exact={set_id}") == {"lee-02"}
    assert listed("flag=no_score_stated") == {"lee-02"}
    assert listed("flag=score_mismatch") == set()
    SessionSummary.objects.filter(session=kim).update(review_status="approved")
    assert listed("summary__review_status__exact=unreviewed") == {"lee-02"}
    assert listed("q=lee") == {"lee-02"}
    assert listed(f"q={kim.external_id}") == {"kim-07"}


def test_the_list_page_does_not_grow_with_the_learners(admin: Client) -> None:
    """A filter listing every learner made a page of 0.8 MB for 10,000 learners: the page
    holds one page of rows, whatever the learners; one learner's sessions are a search (or
    ``?learner=``) away."""

    def add(n: int) -> None:
        now = timezone.now()
        start = StudySession.objects.count()
        StudySession.objects.bulk_create(
            StudySession(learner=f"learner-{start + i:05d}", started_at=now, ended_at=now,
                         right=1, total=1, fingerprint=f"{start + i}")
            for i in range(n)
        )  # fmt: skip

    def size() -> int:
        response = admin.get(LIST_URL)
        assert response.status_code == 200
        return len(response.content)

    add(150)  # more than a page of rows
    few = size()
    add(1000)
    many = size()
    print(f"list_page_bytes learners=150:{few} learners=1150:{many}")
    assert many - few < 2000  # the count and the pages' links, not a link per learner
    assert admin.get(f"{LIST_URL}?learner=learner-00007").context["cl"].result_count == 1


def test_the_list_costs_the_same_queries_for_few_and_many_sessions(admin: Client) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin.get(LIST_URL).status_code == 200
        return len(queries)

    def add(n: int) -> None:
        for _ in range(n):
            summarize(session(), "3문제 중 2문제. 2번 문제를 틀렸습니다.")
            summaries.queue_summaries([session("lee-02")])

    add(2)
    few = count()
    add(10)
    assert count() == few


def test_the_page_shows_answers_right_and_wrong_the_summary_and_its_revisions(
    admin: Client,
) -> None:
    recorded = session()
    summarize(recorded, "An older summary.")
    summarize(recorded, "3문제 중 2문제를 맞혔습니다. 2번 문제를 틀렸습니다.")
    html = admin.get(page_url(recorded)).content.decode()
    assert html.count(">right<") == 2 and html.count(">wrong<") == 1
    assert "2 (Paris)" in html and "1 (Seoul)" in html
    question = StudyQuestion.objects.get(external_id="q-1")
    assert reverse("admin:studyqueue_studyquestion_change", args=[question.pk]) in html
    assert html.count("2/3") == 3  # the score, the one the summary states, in its revisions too
    assert html.index("2번 문제를 틀렸습니다") < html.index("An older summary.")  # newest first
    assert 'id="sq-regenerate"' in html and 'id="sq-approved"' in html
    assert 'name="_save"' not in html  # nothing to save: every field is read-only


def test_regenerate_from_the_list_and_the_page_queues_a_summary_job(admin: Client) -> None:
    one, two = session(), session("lee-02")
    response = admin.post(
        LIST_URL,
        {"action": "regenerate_summary", "_selected_action": [one.pk, two.pk]},
        follow=True,
    )
    assert "Queued 2 summary job(s); 0 already queued." in said(response)
    jobs = StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY)
    assert set(jobs.values_list("study_session", flat=True)) == {one.pk, two.pk}
    # The explanation the missed question needs is queued first.
    assert StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).count() == 1
    url = reverse("admin:studyqueue_studysession_regenerate", args=[one.pk])
    assert "Queued 0 summary job(s); 1 already queued." in said(admin.post(url, follow=True))
    assert admin.get(url).status_code == 405


def test_without_change_permission_nobody_regenerates(db: None) -> None:
    recorded = session()
    viewer = staff("view_studysession")
    html = viewer.get(page_url(recorded)).content.decode()
    assert "sq-regenerate" not in html and "sq-approved" not in html
    assert "regenerate_summary" not in viewer.get(LIST_URL).content.decode()
    url = reverse("admin:studyqueue_studysession_regenerate", args=[recorded.pk])
    assert viewer.post(url).status_code == 403
    viewer.post(LIST_URL, {"action": "regenerate_summary", "_selected_action": [recorded.pk]})
    assert not StudyQuestionJob.objects.filter(kind=JobKind.SESSION_SUMMARY).exists()
    assert viewer.get(reverse("admin:studyqueue_studysession_add")).status_code == 403


def test_review_approve_edit_reject_on_the_page(admin: Client) -> None:
    recorded = session()
    question = StudyQuestion.objects.get(external_id="q-1")
    revisions.make_current(ExplanationRevisionFactory(question=question, text="Paris is not it."))
    first = summarize(recorded, "3문제 중 3문제를 맞혔습니다.")
    url = reverse("admin:studyqueue_studysession_review", args=[recorded.pk])

    def decide(summary: SessionSummary, decision: str, **form: str) -> list[str]:
        form = {"summary": str(summary.pk), "seen": "unreviewed", "decision": decision, **form}
        return said(admin.post(url, form, follow=True))

    assert decide(first, "approved") == ["Summary: approved"]
    assert SessionSummary.objects.get(pk=first.pk).reviewed_by == "root"
    assert decide(first, "approved") == ["Nothing decided: this summary changed meanwhile."]
    # An edit on what the page showed: the correction becomes current, checked.
    assert decide(
        first, "edited", seen="approved", text="3문제 중 2문제를 맞혔어요. 2번을 틀렸어요.\r\n"
    ) == ["Summary: edited"]
    recorded.refresh_from_db()
    corrected = recorded.summary
    assert (
        corrected.author == "root"
        and corrected.flags == []
        and corrected.text.endswith("틀렸어요.")
    )
    assert corrected.stated == {"right": 2, "total": 3}
    assert decide(first, "rejected", seen="edited") == [
        "Nothing decided: this summary changed meanwhile."
    ]
    assert decide(corrected, "edited", seen="edited", text=" ") == ["Nothing decided: a bad form."]
    # Reject: a new summary is queued (its explanation exists: nothing else).
    assert decide(corrected, "rejected", seen="edited") == ["Summary: rejected"]
    assert (
        StudyQuestionJob.objects.filter(
            study_session=recorded, kind=JobKind.SESSION_SUMMARY
        ).count()
        == 1
    )
    assert not StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).exists()
    # A reviewer without the review permission is refused.
    assert staff("view_studysession").post(url, {"summary": corrected.pk}).status_code == 403


def test_every_summary_flag_has_a_label_a_meaning_and_a_colour() -> None:
    assert set(SUMMARY_FLAGS) == set(summaries.FLAGS)
    assert all(label and meaning and colour for label, meaning, colour in SUMMARY_FLAGS.values())


def test_the_korean_list_wraps_between_words_not_inside_them(admin: Client) -> None:
    session("kim-07")
    html = admin.get(LIST_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert '<html lang="ko"' in html
    assert 'html[lang|="ko"] #result_list td { word-break: keep-all;' in html


def test_a_session_page_is_titled_in_our_korean_not_djangos(admin):
    page = admin.get(page_url(session()), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "<h1>학습 세션 보기</h1>" in page and "뷰 학습 세션" not in page
