"""The review page: who sees it, what it shows, each decision posted as the page posts it,
the admin log, and the dashboard's counts."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse

from studyqueue import revisions
from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory
from tests.helpers.admin import DASHBOARD_URL, staff

pytestmark = pytest.mark.django_db

REVIEW_URL = reverse("admin:studyqueue_explanationreview_changelist")
DECIDE_URL = reverse("admin:studyqueue_explanationreview_decide")


def explained(explanation: str = "Because it is so.", flags: list[str] | None = None, **question):  # type: ignore[no-untyped-def]
    """A question with a current (unreviewed) revision."""
    revision = ExplanationRevisionFactory(
        question=StudyQuestionFactory(**question), text=explanation, flags=flags or []
    )
    revisions.make_current(revision)
    return StudyQuestion.objects.get(pk=revision.question_id)


def test_only_reviewers_see_the_page_and_post_decisions():
    question = explained()
    plain = staff("view_studyquestion")
    assert plain.get(REVIEW_URL).status_code == 403
    post = {"revision": question.current_revision_id, "decision": "approve"}
    assert plain.post(DECIDE_URL, post).status_code == 403
    assert ExplanationRevision.objects.get().review_status == "unreviewed"
    index = plain.get(reverse("admin:app_list", args=["studyqueue"])).content.decode()
    assert REVIEW_URL not in index
    User.objects.get(username="op").user_permissions.add(
        Permission.objects.get(codename="review_explanation")
    )
    assert plain.get(REVIEW_URL).status_code == 200
    assert REVIEW_URL in plain.get(reverse("admin:index")).content.decode()


def test_the_page_shows_everything_needed_to_judge(admin_client):
    question = explained(
        "Old <b>text</b> about Seoul.",
        text="대한민국의 수도는?",
        choices=["서울", "부산"],
        answer="서울",
    )
    newer = ExplanationRevisionFactory(
        question=question, text="New <b>text</b> about Seoul, the capital.", flags=["too_short"]
    )
    revisions.make_current(newer)
    page = admin_client.get(REVIEW_URL).content.decode()
    for shown in ("대한민국의 수도는?", "<li>서울</li>", "<li>부산</li>", "too_short"):
        assert shown in page, shown
    assert 'id="sq-review-key">서울<' in page and 'id="sq-review-stated">—<' in page
    assert "&lt;b&gt;text&lt;/b&gt;" in page and "<b>text</b>" not in page  # escaped
    # The previous revision, side by side with the new one, differences marked.
    assert "<ins>Seoul, the capital.</ins>" in page and "<del>Seoul.</del>" in page
    for key in ("<kbd>a</kbd>", "<kbd>r</kbd>", "<kbd>e</kbd>", "<kbd>j</kbd>", "<kbd>k</kbd>"):
        assert key in page


def test_a_decision_moves_to_the_next_question_and_is_logged(admin_client):
    first, second = explained(), explained()
    response = admin_client.post(
        DECIDE_URL, {"revision": first.current_revision_id, "decision": "approve"}
    )
    assert (
        response.status_code == 302 and response["Location"] == f"{REVIEW_URL}?question={second.pk}"
    )
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == [f"Question #{first.pk}: revision {first.current_revision_id} approved."]
    revision = ExplanationRevision.objects.get(pk=first.current_revision_id)
    assert (revision.review_status, revision.reviewed_by) == ("approved", "admin")
    entry = LogEntry.objects.get(object_id=str(first.pk))
    assert entry.change_message == f"Review: approved revision {revision.pk}"

    response = admin_client.post(
        DECIDE_URL, {"revision": second.current_revision_id, "decision": "reject"}
    )
    job = StudyQuestionJob.objects.get(study_question=second)
    assert job.status == "pending"
    assert response["Location"] == REVIEW_URL  # nothing waits any more
    page = admin_client.get(REVIEW_URL).content.decode()
    assert "Nothing waits for review." in page


def test_an_edit_posted_from_the_page_becomes_the_current_explanation(admin_client):
    question = explained("Wrong: 5.")
    admin_client.post(
        DECIDE_URL,
        {"revision": question.current_revision_id, "decision": "edit", "text": "Right: 4."},
    )
    question.refresh_from_db()
    assert question.explanation == "Right: 4." and question.current_revision.author == "admin"


def test_a_stale_or_bad_post_changes_nothing(admin_client):
    question = explained()
    revision_id = question.current_revision_id
    admin_client.post(DECIDE_URL, {"revision": revision_id, "decision": "approve"})
    # A second reviewer's page still shows the question: theirs is refused, not applied.
    newer = ExplanationRevisionFactory(question=question, text="Newer.")
    revisions.make_current(newer)
    response = admin_client.post(
        DECIDE_URL,
        {"revision": revision_id, "decision": "reject", "back": f"{REVIEW_URL}?question=1"},
    )
    assert response["Location"] == f"{REVIEW_URL}?question=1"
    assert "changed meanwhile" in str(list(get_messages(response.wsgi_request))[-1])
    assert not StudyQuestionJob.objects.exists()
    for bad in ({"revision": "x", "decision": "approve"}, {"revision": newer.pk, "decision": "?"}):
        response = admin_client.post(DECIDE_URL, bad)
        assert response.status_code == 302
    response = admin_client.post(
        DECIDE_URL, {"revision": newer.pk, "decision": "reject", "back": "https://evil.example/"}
    )
    assert ExplanationRevision.objects.get(pk=newer.pk).review_status == "rejected"
    assert admin_client.get(f"{REVIEW_URL}?question=abc").status_code == 200


def test_the_dashboard_counts_what_waits_and_links_the_review_page(admin_client):
    explained(), explained(flags=["wrong_script"])
    approved = explained(flags=["too_short"])
    revisions.decide(approved.current_revision, "approved", by="ana")
    page = admin_client.get(DASHBOARD_URL)
    stats = page.context["stats"]
    assert (stats.needs_review, stats.needs_review_flagged) == (2, 1)
    assert REVIEW_URL in page.content.decode()
    listed = admin_client.get(
        reverse("admin:studyqueue_studyquestion_changelist"), {"review": "waiting"}
    )
    assert len(listed.context["cl"].result_list) == 2
    approved_list = admin_client.get(
        reverse("admin:studyqueue_studyquestion_changelist"), {"review_status": "approved"}
    )
    assert [q.pk for q in approved_list.context["cl"].result_list] == [approved.pk]


def test_a_revision_page_shows_the_previous_text_side_by_side(admin_client):
    question = explained("Seoul is the capital.")
    newer = ExplanationRevisionFactory(question=question, text="Seoul is the largest city.")
    page = admin_client.get(
        reverse("admin:studyqueue_explanationrevision_change", args=[newer.pk])
    ).content.decode()
    assert "<del>capital.</del>" in page and "<ins>largest city.</ins>" in page
    first = admin_client.get(
        reverse("admin:studyqueue_explanationrevision_change", args=[question.current_revision_id])
    ).content.decode()
    assert "sq-diff-old" not in first  # nothing before it
