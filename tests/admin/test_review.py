"""The review page: who sees it, what it shows, each decision posted as the page posts it,
the admin log, and the dashboard's counts."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone, translation

from studyqueue.explanations import review_queue, revisions
from studyqueue.models import ExplanationRevision, StudyQuestion, StudyQuestionJob
from tests.factories import ExplanationRevisionFactory, StudyQuestionFactory
from tests.helpers.admin import DASHBOARD_URL, staff

pytestmark = pytest.mark.django_db

REVIEW_URL = reverse("admin:studyqueue_explanationreview_changelist")
DECIDE_URL = reverse("admin:studyqueue_explanationreview_decide")


@pytest.fixture(autouse=True)
def _no_language_left() -> Iterator[None]:
    """A page asked for in Korean leaves Korean active on this thread (LocaleMiddleware):
    the next test would run in it."""
    yield
    translation.deactivate()


def explained(explanation: str = "Because it is so.", flags: list[str] | None = None, **question):  # type: ignore[no-untyped-def]
    """A question with a current (unreviewed) revision."""
    revision = ExplanationRevisionFactory(
        question=StudyQuestionFactory(**question), text=explanation, flags=flags or []
    )
    revisions.make_current(revision)
    return StudyQuestion.objects.get(pk=revision.question_id)


def post(question: StudyQuestion, decision: str, **fields: str) -> dict[str, object]:
    """A decision form as the page posts it: the item's revision and the state shown."""
    item = review_queue.item(question.pk)
    assert item is not None
    return {"revision": item.revision.pk, "seen": item.seen.token(), "decision": decision, **fields}


def test_only_reviewers_see_the_page_and_post_decisions():
    question = explained()
    plain = staff("view_studyquestion")
    assert plain.get(REVIEW_URL).status_code == 403
    post = {"revision": question.current_revision_id, "decision": "approved"}
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
    response = admin_client.post(DECIDE_URL, post(first, "approved"))
    assert (
        response.status_code == 302 and response["Location"] == f"{REVIEW_URL}?question={second.pk}"
    )
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == [f"Question #{first.pk}: revision {first.current_revision_id} approved."]
    revision = ExplanationRevision.objects.get(pk=first.current_revision_id)
    assert (revision.review_status, revision.reviewed_by) == ("approved", "admin")
    entry = LogEntry.objects.get(object_id=str(first.pk))
    assert entry.change_message == f"Review: approved revision {revision.pk}"

    response = admin_client.post(DECIDE_URL, post(second, "rejected"))
    job = StudyQuestionJob.objects.get(study_question=second)
    assert job.status == "pending"
    assert response["Location"] == REVIEW_URL  # nothing waits any more
    page = admin_client.get(REVIEW_URL).content.decode()
    assert "Nothing waits for review." in page


def test_an_edit_posted_from_the_page_becomes_the_current_explanation(admin_client):
    question = explained("Wrong: 5.")
    admin_client.post(DECIDE_URL, post(question, "edited", text="Right: 4."))
    question.refresh_from_db()
    assert question.explanation == "Right: 4." and question.current_revision.author == "admin"


def test_a_stale_or_bad_post_changes_nothing(admin_client):
    question = explained()
    stale = post(question, "rejected", back=f"{REVIEW_URL}?question=1")
    admin_client.post(DECIDE_URL, post(question, "approved"))
    # A second reviewer's page still shows the question: theirs is refused, not applied.
    newer = ExplanationRevisionFactory(question=question, text="Newer.")
    revisions.make_current(newer)
    response = admin_client.post(DECIDE_URL, stale)
    assert response["Location"] == f"{REVIEW_URL}?question=1"
    assert "changed meanwhile" in str(list(get_messages(response.wsgi_request))[-1])
    assert not StudyQuestionJob.objects.exists()
    bad_forms = (
        {"revision": "x", "decision": "approved"},
        {"revision": newer.pk, "decision": "?"},
        {"revision": newer.pk, "decision": "approved"},  # no state shown: not a page's form
        {"revision": newer.pk, "decision": "approved", "seen": "approved|x|0|1|y"},
    )
    for bad in bad_forms:
        response = admin_client.post(DECIDE_URL, bad)
        assert response.status_code == 302
        assert "a bad form" in str(list(get_messages(response.wsgi_request))[-1])
    assert ExplanationRevision.objects.get(pk=newer.pk).review_status == "unreviewed"
    response = admin_client.post(
        DECIDE_URL, post(question, "rejected", back="https://evil.example/")
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
        reverse("admin:studyqueue_studyquestion_changelist"),
        {"current_revision__review_status__exact": "approved"},
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


def test_the_page_carries_the_state_it_shows_in_every_decision_form(admin_client):
    question = explained()
    page = admin_client.get(f"{REVIEW_URL}?question={question.pk}")
    token = review_queue.item(question.pk).seen.token()
    assert page.context["seen"] == token
    assert page.content.decode().count(f'name="seen" value="{token}"') == 3


def test_a_second_reviewer_on_the_same_page_is_refused_and_changes_nothing(admin_client):
    question = explained()
    revision_id = question.current_revision_id
    alice = post(question, "approved")
    bob = post(question, "rejected", back=f"{REVIEW_URL}?question={question.pk}")  # same page
    admin_client.post(DECIDE_URL, alice)
    response = admin_client.post(DECIDE_URL, bob)
    assert response["Location"] == f"{REVIEW_URL}?question={question.pk}"
    assert [str(m) for m in get_messages(response.wsgi_request)][-1] == (
        "Nothing decided: another reviewer decided first."
    )
    revision = ExplanationRevision.objects.get(pk=revision_id)
    assert (revision.review_status, revision.reviewed_by) == ("approved", "admin")
    assert not StudyQuestionJob.objects.exists()  # no regeneration queued
    assert LogEntry.objects.count() == 1  # Alice's decision only


def test_saving_the_text_unchanged_is_no_edit_and_says_so(admin_client):
    question = explained("Four.\nCount it on your fingers.")
    revision_id = question.current_revision_id
    # A browser sends the textarea with CRLF line ends.
    response = admin_client.post(
        DECIDE_URL,
        post(question, "edited", text="Four.\r\nCount it on your fingers.\r\n", back="/back/"),
    )
    assert response["Location"] == "/back/"
    assert [str(m) for m in get_messages(response.wsgi_request)][-1] == (
        f"Nothing changed: the text is the same as revision {revision_id}. Nothing was "
        "decided; approve it if it is right."
    )
    assert ExplanationRevision.objects.count() == 1
    assert ExplanationRevision.objects.get().review_status == "unreviewed"
    assert not LogEntry.objects.exists()
    # A real change keeps its lines with \n only.
    admin_client.post(DECIDE_URL, post(question, "edited", text="Four.\r\nTwo and two.\r\n"))
    question.refresh_from_db()
    assert question.explanation == "Four.\nTwo and two." and "\r" not in question.explanation


def test_a_correction_with_a_nul_is_a_form_error_and_keeps_the_text(admin_client):
    question = explained("Wrong: 5.")
    text = "Right: 4.\x00 Count it."
    response = admin_client.post(DECIDE_URL, post(question, "edited", text=text))
    assert response.status_code == 200
    page = response.content.decode()
    assert response.context["edit_errors"] == [
        "The text holds a character that cannot be stored (a NUL or a lone surrogate)."
    ]
    assert 'id="sq-edit-errors"' in page and "cannot be stored" in page
    # The box is open with the reviewer's text, on a page whose forms post its state.
    assert f'<textarea name="text" id="sq-edit-text">{text}</textarea>' in page
    assert 'id="sq-edit-form" hidden' not in page
    assert response.context["seen"] == review_queue.item(question.pk).seen.token()
    assert ExplanationRevision.objects.count() == 1
    assert ExplanationRevision.objects.get().review_status == "unreviewed"
    assert not LogEntry.objects.exists()


def test_an_edit_overtaken_by_another_reviewer_keeps_the_text_in_the_box(admin_client):
    question = explained("Wrong: 5.")
    mine = post(question, "edited", text="Right: 4, as counting shows.")
    admin_client.post(DECIDE_URL, post(question, "approved"))
    response = admin_client.post(DECIDE_URL, mine)
    assert response.status_code == 200
    assert response.context["edit_errors"] == ["Nothing saved: another reviewer decided first."]
    assert "Right: 4, as counting shows.</textarea>" in response.content.decode()
    assert ExplanationRevision.objects.get().review_status == "approved"


def test_a_candidate_is_shown_as_one_beside_the_approved_explanation(admin_client):
    question = explained("Seoul is the capital.")
    revisions.decide(question.current_revision, "approved", by="ana")
    candidate = ExplanationRevisionFactory(
        question=question, text="Seoul is the capital and largest city.", candidate=True
    )
    page = admin_client.get(f"{REVIEW_URL}?question={question.pk}").content.decode()
    # Its own status is unreviewed; what the reviewer needs is what it would replace.
    assert 'id="sq-review-status">candidate for an approved explanation<' in page
    assert "Changes from the current explanation" in page
    assert f"revision {question.current_revision_id}: the current explanation, approved" in page
    assert f"revision {candidate.pk}: the candidate" in page
    assert "(before)" not in page and "previous revision" not in page
    korean = admin_client.get(
        f"{REVIEW_URL}?question={question.pk}", HTTP_ACCEPT_LANGUAGE="ko"
    ).content.decode()
    assert 'id="sq-review-status">승인된 해설의 후보<' in korean
    assert f"개정본 {question.current_revision_id}: 현재 해설, 승인됨" in korean
    assert "미검토" not in korean and "(이전)" not in korean


def test_a_key_given_as_a_number_shows_its_choice(admin_client):
    question = explained(
        "정답: 1", text="'잡수다'의 높임말은?", choices=["드시다", "먹다"], answer="1"
    )
    ExplanationRevision.objects.filter(pk=question.current_revision_id).update(stated_answer="②")
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-key">1 (드시다)<' in page
    assert 'id="sq-review-stated">② (먹다)<' in page
    by_text = explained(text="Capital?", choices=["Seoul", "Busan"], answer="Seoul")
    page = admin_client.get(f"{REVIEW_URL}?question={by_text.pk}").content.decode()
    assert 'id="sq-review-key">Seoul<' in page  # a choice's own text: nothing to add


def test_the_page_uses_the_admins_buttons(admin_client):
    explained(), explained()
    page = admin_client.get(REVIEW_URL).content.decode()
    for control in ("sq-approve", "sq-reject", "sq-edit", "sq-next", "sq-edit-save"):
        assert re.search(rf'id="{control}" class="button( default)? sq-button"', page), control


def test_a_correction_is_checked_against_the_key_as_a_reply_is(admin_client):
    question = explained(
        "정답: ② 부산", text="대한민국의 수도는?", choices=["서울", "부산"], answer="서울"
    )
    wrong = "정답: ② 부산\n" + "부산은 대한민국에서 가장 큰 항구 도시이며 수도입니다. " * 3
    response = admin_client.post(DECIDE_URL, post(question, "edited", text=wrong))
    question.refresh_from_db()
    correction = question.current_revision
    assert (correction.author, correction.text) == ("admin", wrong.strip())
    assert (correction.flags, correction.stated_answer) == (["answer_mismatch"], "② 부산")
    assert question.explanation_flags == ["answer_mismatch"]  # the list's filters see it
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert shown[-1] == "Your correction is flagged: answer mismatch."
    right = "정답: ① 서울\n" + "서울은 대한민국의 수도이며 가장 큰 도시입니다. " * 3
    revisions.decide(correction, "unreviewed", by="admin")  # to be judged again
    response = admin_client.post(DECIDE_URL, post(question, "edited", text=right))
    question.refresh_from_db()
    assert (question.current_revision.flags, question.current_revision.stated_answer) == (
        [],
        "① 서울",
    )
    shown = [str(m) for m in get_messages(response.wsgi_request)]  # the first's still unread
    assert shown[-1].endswith("now current.") and sum("flagged" in m for m in shown) == 1


def test_the_page_shows_the_blind_verifiers_choice(admin_client):
    question = explained(
        "서울은 1394년부터 수도였다.\n정답: 1", text="수도는?", choices=["서울", "부산"]
    )
    StudyQuestion.objects.filter(pk=question.pk).update(answer="서울")
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-verifier">not checked yet<' in page
    revision = ExplanationRevision.objects.filter(pk=question.current_revision_id)
    revision.update(verifier_answer=2, verified_at=timezone.now(), flags=["verifier_disagrees"])
    page = admin_client.get(REVIEW_URL, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert 'id="sq-review-verifier">2 (부산)<' in page and "검증 불일치" in page
    revision.update(verifier_answer=None, flags=["verifier_unsure"])
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-verifier">none<' in page and "verifier unsure" in page


def test_the_page_shows_the_step_check_and_marks_the_wrong_sentence(admin_client):
    question = explained(
        "서울은 1394년부터 수도였다. 부산은 <b>수도</b>였다.\n정답: 1",
        text="수도는?",
        choices=["서울", "부산"],
        answer="서울",
    )
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-step-check">not checked yet<' in page and "<mark>" not in page
    revision = ExplanationRevision.objects.filter(pk=question.current_revision_id)
    revision.update(step_check="wrong_step", wrong_step=2, flags=["wrong_step"])
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-step-check">sentence 2<' in page and "wrong step" in page
    # The sentence marked, its text escaped like the rest of the explanation.
    assert (
        'id="sq-review-explanation">서울은 1394년부터 수도였다. '
        "<mark>부산은 &lt;b&gt;수도&lt;/b&gt;였다.</mark>\n정답: 1</div>"
    ) in page
    revision.update(step_check="ok", wrong_step=None, flags=[])
    page = admin_client.get(REVIEW_URL).content.decode()
    assert 'id="sq-review-step-check">No wrong step<' in page and "<mark>" not in page
