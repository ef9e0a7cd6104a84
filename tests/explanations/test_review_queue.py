"""The review queue: what waits, in what order, and each decision with who and when;
approved work is never replaced silently (candidates), on real replies from the test LLM."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.exceptions import ReviewConflict
from studyqueue.explanations import review_queue
from studyqueue.models import ExplanationRevision, ReviewStatus, StudyQuestion, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)

FIRST = "Because two and two make four, as counting on your fingers shows."
SECOND = "Two plus two is four: add one four times, starting from zero, and you reach four."


def explain(llm_server, make_consumer, question: StudyQuestion, answer: str) -> StudyQuestion:  # type: ignore[no-untyped-def]
    llm_server.configure(answer=answer)
    enqueue(question)
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    question.refresh_from_db()
    return question


def test_approve_records_who_and_when_and_the_question_leaves_the_queue(llm_server, make_consumer):
    first, second = StudyQuestionFactory(), StudyQuestionFactory()
    for question in (first, second):
        explain(llm_server, make_consumer, question, FIRST)
    assert list(review_queue.waiting()) == [first, second]
    assert review_queue.counts() == (2, 0)
    revision = first.current_revision
    result = review_queue.decide(revision.pk, ReviewStatus.APPROVED, by="ana")
    revision.refresh_from_db()
    assert (revision.review_status, revision.reviewed_by) == ("approved", "ana")
    assert revision.reviewed_at is not None and result.current == revision
    assert list(review_queue.waiting()) == [second]
    assert list(StudyQuestion.objects.approved()) == [first]
    # The queue moves on from the decided one, wrapping around at the end.
    assert review_queue.next_id(first.pk) == second.pk
    assert review_queue.next_id(second.pk) == second.pk
    assert review_queue.next_id(second.pk, backwards=True) == second.pk


def test_reject_queues_a_regeneration_that_becomes_current_unreviewed(llm_server, make_consumer):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    rejected = question.current_revision
    result = review_queue.decide(rejected.pk, ReviewStatus.REJECTED, by="ana")
    job = StudyQuestionJob.objects.get(pk=result.job_id)
    assert (job.status, job.study_question_id) == ("pending", question.pk)
    rejected.refresh_from_db()
    assert rejected.review_status == "rejected"
    assert list(review_queue.waiting()) == []  # decided; the regeneration is on its way
    question = explain(llm_server, make_consumer, question, SECOND)  # runs the queued job
    assert question.explanation == SECOND and not question.current_revision.candidate
    assert question.current_revision.review_status == "unreviewed"
    assert list(review_queue.waiting()) == [question]


def test_edit_keeps_the_correction_as_a_new_current_revision_by_the_reviewer(
    llm_server, make_consumer
):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), "Short.")
    original = question.current_revision
    assert original.flags == ["too_short"]
    result = review_queue.decide(original.pk, ReviewStatus.EDITED, by="ana", text=f"  {SECOND}\n")
    question.refresh_from_db()
    correction = question.current_revision
    assert correction == result.current and correction != original
    assert question.explanation == correction.text == SECOND
    assert (correction.author, correction.based_on, correction.review_status) == (
        "ana",
        original,
        "edited",
    )
    assert (correction.flags, correction.prompt_version) == ([], original.prompt_version)
    assert question.explanation_flags == []
    original.refresh_from_db()
    assert (original.review_status, original.reviewed_by) == ("edited", "ana")
    with pytest.raises(ReviewConflict):  # no longer what is judged
        review_queue.decide(original.pk, ReviewStatus.APPROVED, by="bo")
    with pytest.raises(ValueError):
        review_queue.decide(correction.pk, ReviewStatus.EDITED, by="bo", text="  ")


@pytest.mark.parametrize("protect", ["approved", "edited"])
def test_a_regeneration_of_approved_work_waits_as_a_candidate(llm_server, make_consumer, protect):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    review_queue.decide(
        question.current_revision.pk, ReviewStatus(protect), by="ana", text=FIRST + " Yes."
    )
    question.refresh_from_db()
    kept, kept_text = question.current_revision, question.explanation
    question = explain(llm_server, make_consumer, question, SECOND)
    assert (question.current_revision, question.explanation) == (kept, kept_text)
    candidate = ExplanationRevision.objects.get(candidate=True)
    assert candidate.text == SECOND
    item = review_queue.item(question.pk)
    assert (item.revision, item.previous, item.revision.candidate) == (candidate, kept, True)
    assert list(review_queue.waiting()) == [question]
    # A newer regeneration supersedes the waiting candidate (kept, no longer waiting).
    question = explain(llm_server, make_consumer, question, SECOND + " Again.")
    newest = ExplanationRevision.objects.get(candidate=True)
    assert newest.pk > candidate.pk and question.explanation == kept_text
    review_queue.decide(newest.pk, ReviewStatus.APPROVED, by="bo")
    question.refresh_from_db()
    assert question.explanation == SECOND + " Again." and question.current_revision == newest
    newest.refresh_from_db()
    assert (newest.candidate, newest.review_status, newest.reviewed_by) == (
        False,
        "approved",
        "bo",
    )


def test_rejecting_a_candidate_keeps_the_approved_explanation(llm_server, make_consumer):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    review_queue.decide(question.current_revision.pk, ReviewStatus.APPROVED, by="ana")
    question = explain(llm_server, make_consumer, question, SECOND)
    candidate = ExplanationRevision.objects.get(candidate=True)
    result = review_queue.decide(candidate.pk, ReviewStatus.REJECTED, by="ana")
    assert result.job_id is None and not StudyQuestionJob.objects.active().exists()
    question.refresh_from_db()
    assert question.explanation == FIRST and list(review_queue.waiting()) == []
    candidate.refresh_from_db()
    assert (candidate.candidate, candidate.review_status) == (False, "rejected")


def test_enqueue_outdated_leaves_approved_work_alone_unless_asked(
    llm_server, make_consumer, settings
):
    approved = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    review_queue.decide(approved.current_revision.pk, ReviewStatus.APPROVED, by="ana")
    plain = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_MODEL": "another-model"}
    make_consumer().run_cycle()  # the live consumer's new model: all outdated
    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out)
    assert out.getvalue().strip() == "Created 1 explanation job(s); 0 already queued."
    assert list(StudyQuestionJob.objects.active().values_list("study_question", flat=True)) == [
        plain.pk
    ]
    call_command("enqueue", "--outdated", "--include-approved", stdout=out)
    assert StudyQuestionJob.objects.active().filter(study_question=approved).exists()
    make_consumer().run_cycle()
    approved.refresh_from_db()
    assert approved.explanation == FIRST  # the regeneration waits as a candidate
    assert ExplanationRevision.objects.filter(question=approved, candidate=True).count() == 1


def test_export_approved_only_and_every_row_carries_its_review_status(llm_server, make_consumer):
    import csv
    import json

    approved, edited, plain = (StudyQuestionFactory() for _ in range(3))
    for question in (approved, edited, plain):
        explain(llm_server, make_consumer, question, FIRST)
    review_queue.decide(approved.current_revision.pk, ReviewStatus.APPROVED, by="ana")
    review_queue.decide(edited.current_revision.pk, ReviewStatus.EDITED, by="ana", text=SECOND)
    out = StringIO()
    call_command("exportexplanations", stdout=out, stderr=StringIO())
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["id"], r["review_status"]) for r in rows] == [
        (approved.pk, "approved"),
        (edited.pk, "edited"),
        (plain.pk, "unreviewed"),
    ]
    out = StringIO()
    call_command(
        "exportexplanations", "--approved", "--format", "csv", stdout=out, stderr=StringIO()
    )
    table = list(csv.DictReader(StringIO(out.getvalue().removeprefix("\ufeff"))))
    assert [(r["id"], r["review_status"], r["explanation"]) for r in table] == [
        (str(approved.pk), "approved", FIRST),
        (str(edited.pk), "edited", SECOND),
    ]


def test_of_two_reviewers_on_one_item_the_second_is_refused_and_changes_nothing(
    llm_server, make_consumer
):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    revision = question.current_revision
    seen = review_queue.item(question.pk).seen  # both pages show it unreviewed
    review_queue.decide(revision.pk, ReviewStatus.APPROVED, by="alice", seen=seen)
    with pytest.raises(ReviewConflict, match="another reviewer decided first"):
        review_queue.decide(revision.pk, ReviewStatus.REJECTED, by="bob", seen=seen)
    revision.refresh_from_db()
    assert (revision.review_status, revision.reviewed_by) == ("approved", "alice")
    assert not StudyQuestionJob.objects.active().exists()  # no regeneration queued
    # A page loaded after Alice's decision may overrule it; one loaded before never does,
    # even once the revision is approved again (the time of the decision is in the state).
    after_alice = review_queue.item(question.pk).seen
    review_queue.decide(revision.pk, ReviewStatus.REJECTED, by="bob", seen=after_alice)
    review_queue.decide(
        revision.pk, ReviewStatus.APPROVED, by="cy", seen=review_queue.item(question.pk).seen
    )
    with pytest.raises(ReviewConflict):
        review_queue.decide(revision.pk, ReviewStatus.REJECTED, by="dee", seen=after_alice)
    revision.refresh_from_db()
    assert (revision.review_status, revision.reviewed_by) == ("approved", "cy")


def test_a_page_shown_before_the_question_changed_decides_nothing(llm_server, make_consumer):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    seen = review_queue.item(question.pk).seen
    StudyQuestion.objects.filter(pk=question.pk).update(answer="five")
    with pytest.raises(ReviewConflict, match="the question changed meanwhile"):
        review_queue.decide(
            question.current_revision_id, ReviewStatus.APPROVED, by="ana", seen=seen
        )
    assert not StudyQuestion.objects.approved().exists()


@pytest.mark.postgres
@pytest.mark.parametrize("second", ["rejected", "approved", "edited"])
def test_two_reviewers_at_once_on_postgres_exactly_one_decides(llm_server, make_consumer, second):
    """Two threads, each on its own connection, decide on the same page state at once."""
    import threading

    from django.db import connections

    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    revision_id = question.current_revision_id
    seen = review_queue.item(question.pk).seen
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def decide(who: str, decision: ReviewStatus) -> None:
        try:
            start.wait(timeout=10)
            review_queue.decide(revision_id, decision, by=who, text=SECOND, seen=seen)
            outcomes[who] = "decided"
        except ReviewConflict:
            outcomes[who] = "refused"
        except BaseException as exc:  # reported below, not lost in the thread
            outcomes[who] = repr(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=decide, args=("alice", ReviewStatus.APPROVED)),
        threading.Thread(target=decide, args=("bob", ReviewStatus(second))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes.values()) == ["decided", "refused"], outcomes
    (winner,) = [who for who, outcome in outcomes.items() if outcome == "decided"]
    revision = ExplanationRevision.objects.get(pk=revision_id)
    assert revision.reviewed_by == winner
    # Only the winner's effects: a regeneration or a correction only if it was Bob's.
    bob_won = winner == "bob"
    assert StudyQuestionJob.objects.active().exists() == (bob_won and second == "rejected")
    assert ExplanationRevision.objects.filter(author="bob").exists() == (
        bob_won and second == "edited"
    )


def test_an_edit_that_changes_nothing_but_line_ends_is_no_edit(llm_server, make_consumer):
    from studyqueue.exceptions import UnchangedEdit

    text = "Two plus two is four.\nCount it on your fingers."
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), text)
    original = question.current_revision
    with pytest.raises(UnchangedEdit):  # as a browser sends it: CRLF, a line end at the end
        review_queue.decide(
            original.pk, ReviewStatus.EDITED, by="ana", text=text.replace("\n", "\r\n") + "\r\n"
        )
    original.refresh_from_db()
    assert original.review_status == "unreviewed" and ExplanationRevision.objects.count() == 1
    # A real correction is stored with its line ends as \n.
    review_queue.decide(
        original.pk, ReviewStatus.EDITED, by="ana", text="Four.\r\nCount it.\rTwice.\r\n"
    )
    question.refresh_from_db()
    assert question.explanation == question.current_revision.text == "Four.\nCount it.\nTwice."


@pytest.mark.parametrize("bad", ["Four\x00.", "Four\ud800."])
def test_a_correction_no_column_can_store_is_refused_before_anything_is_written(
    llm_server, make_consumer, bad
):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    with pytest.raises(ValueError, match="cannot be stored"):
        review_queue.decide(question.current_revision_id, ReviewStatus.EDITED, by="ana", text=bad)
    assert ExplanationRevision.objects.count() == 1
    assert ExplanationRevision.objects.get().review_status == "unreviewed"


def test_a_candidate_accepted_by_one_reviewer_is_not_rejected_by_another(llm_server, make_consumer):
    question = explain(llm_server, make_consumer, StudyQuestionFactory(), FIRST)
    review_queue.decide(question.current_revision_id, ReviewStatus.APPROVED, by="ana")
    question = explain(llm_server, make_consumer, question, SECOND)
    candidate = ExplanationRevision.objects.get(candidate=True)
    seen = review_queue.item(question.pk).seen
    review_queue.decide(candidate.pk, ReviewStatus.APPROVED, by="alice", seen=seen)
    with pytest.raises(ReviewConflict, match="another reviewer decided first"):
        review_queue.decide(candidate.pk, ReviewStatus.REJECTED, by="bob", seen=seen)
    question.refresh_from_db()
    assert question.current_revision == candidate and question.explanation == SECOND
    candidate.refresh_from_db()
    assert (candidate.review_status, candidate.reviewed_by) == ("approved", "alice")


def test_the_queue_puts_the_riskiest_explanations_first_and_walks_them_in_that_order():
    """The verifier disagrees, the answer line names another choice, the verifier is
    unsure, then the rest; each rank in id order; next and back wrap around."""

    def explained(flags: list[str]) -> int:
        question = StudyQuestionFactory(text=f"Flagged {flags}?")
        revision = ExplanationRevision.objects.create(question=question, text="x", flags=flags)
        StudyQuestion.objects.filter(pk=question.pk).update(
            current_revision=revision, explanation="x", explanation_flags=flags
        )
        return question.pk

    plain = explained([])
    unsure = explained(["verifier_unsure"])
    mismatch = explained(["answer_mismatch"])
    disagrees = explained(["too_short", "verifier_disagrees"])
    also_plain = explained(["too_short"])
    mismatch_and_disagrees = explained(["answer_mismatch", "verifier_disagrees"])
    wrong_step = explained(["wrong_step"])  # a false step that reaches the key: first
    step_unsure = explained(["step_check_unsure"])
    order = [
        wrong_step, disagrees, mismatch_and_disagrees, mismatch, unsure, step_unsure, plain,
        also_plain,
    ]  # fmt: skip
    assert list(review_queue.waiting().values_list("pk", flat=True)) == order
    assert review_queue.next_id() == wrong_step
    walked = [review_queue.next_id(pk) for pk in order]
    assert walked == [*order[1:], order[0]]
    back = [review_queue.next_id(pk, backwards=True) for pk in order]
    assert back == [order[-1], *order[:-1]]
