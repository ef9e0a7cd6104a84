"""The admin pages' query-count guards: what the question list (and its filters), the review
page, the revision list and the dashboard (page and JSON feed) cost the database does not grow
with their rows. Each page is rendered over a few rows, then over many more of every kind the
page shows (questions with revisions, flags, candidates, jobs, attempts, consumers, gate
limits), and the two counts must be equal: a per-row query fails here, on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

from studyqueue.explanations import revisions
from studyqueue.models import (
    ExplanationRevision,
    GateLimit,
    JobAttempt,
    JobStatus,
    QueueConsumer,
    StudyQuestion,
    StudyQuestionJob,
)
from tests.factories import (
    ExplanationRevisionFactory,
    QueueConsumerFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)
from tests.helpers.admin import DASHBOARD_URL, DATA_URL, QUESTIONS_URL

pytestmark = pytest.mark.django_db

REVIEW_URL = reverse("admin:studyqueue_explanationreview_changelist")
REVISIONS_URL = reverse("admin:studyqueue_explanationrevision_changelist")
FEW, MANY = 2, 12  # rows of each kind added per round; MANY fits one page of every list


@pytest.fixture(autouse=True)
def _no_language_left() -> Iterator[None]:
    yield
    translation.deactivate()


@pytest.fixture
def admin(db: None) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def add_rows(count: int) -> None:
    """``count`` of each: explained questions (a flagged current revision, an older one, a
    candidate on an approved one), jobs in every status with attempts, live consumers with
    their own gate limit, and questions with no explanation yet."""
    now = timezone.now()
    for n in range(count):
        question = StudyQuestionFactory(choices=["3", "4"], answer="4")
        older = ExplanationRevisionFactory(question=question, text="An older explanation.")
        revisions.make_current(older)
        current = ExplanationRevisionFactory(
            question=question, flags=["answer_mismatch"], stated_answer="3"
        )
        revisions.make_current(current)
        approved = StudyQuestionFactory(text=f"Approved {n}?")
        kept = ExplanationRevisionFactory(question=approved, review_status="approved")
        revisions.make_current(kept)
        ExplanationRevisionFactory(question=approved, candidate=True, flags=["truncated"])
        for status in JobStatus.values:
            job = StudyQuestionJobFactory(
                **({"study_question": question} if status == JobStatus.COMPLETED else {}),
                status=status,
                attempts=1,
                error_code="llm_server_error" if status == JobStatus.FAILED else "",
                worker_id=f"box:{n}",
                completed_at=now if status == JobStatus.COMPLETED else None,
                started_at=now,
            )
            JobAttempt.objects.create(
                job=job, number=1, started_at=now, ended_at=now, worker_id=f"box:{n}"
            )
        url = f"http://127.0.0.1:{9000 + GateLimit.objects.count()}/v1"
        QueueConsumerFactory(llm_url=url, gate_permits="auto" if n % 2 else "2")
        GateLimit.objects.create(endpoint=url, limit=2, rates={"1": 20.0, "2": 39.0})
        StudyQuestionFactory(text=f"Unexplained {n}?")


def count(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


def counts(client: Client, url: str) -> tuple[int, int]:
    """The page's queries over ``FEW`` rows of each kind, then over ``FEW + MANY``."""
    add_rows(FEW)
    count(client, url)  # warm: per-process caches (content types, the basis) filled once
    few = count(client, url)
    add_rows(MANY)
    return few, count(client, url)


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?explanation=outdated",
        "?explanation=current",
        "?explanation=missing",
        "?review=waiting",
        "?review=waiting_flagged",
        "?review=any",
        "?review=answer_mismatch",
        "?current_revision__review_status__exact=approved",
        "?q=What",
    ],
)
def test_the_question_list_costs_the_same_whatever_its_rows(admin: Client, query: str) -> None:
    few, many = counts(admin, QUESTIONS_URL + query)
    assert StudyQuestion.objects.count() >= 4 * (FEW + MANY)
    assert many == few, f"{QUESTIONS_URL + query}: {few} queries over {FEW}, {many} over more"


def test_a_question_page_costs_the_same_whatever_its_revisions_and_jobs(admin: Client) -> None:
    """The change page lists the question's revisions and jobs (inlines)."""
    question = StudyQuestionFactory(choices=["3", "4"], answer="4")
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])

    def grow(n: int) -> None:
        for _ in range(n):
            revisions.make_current(
                ExplanationRevisionFactory(question=question, flags=["truncated"])
            )
            job = StudyQuestionJobFactory(study_question=question, status=JobStatus.COMPLETED)
            JobAttempt.objects.create(job=job, number=1, started_at=timezone.now())

    grow(FEW)
    count(admin, url)
    few = count(admin, url)
    grow(MANY)
    many = count(admin, url)
    assert many == few, f"{few} queries with {FEW} revisions and jobs, {many} with more"
    # The inline still marks the one current revision (read in the list's own query).
    question.refresh_from_db()
    html = admin.get(url).content.decode()
    assert html.count("(current)") == 1
    assert f">#{question.current_revision_id}</a> (current)" in html


def test_the_review_page_costs_the_same_whatever_waits(admin: Client) -> None:
    """The first waiting item, with the queue's counts and its neighbours."""
    few, many = counts(admin, REVIEW_URL)
    assert many == few, f"{few} queries over {FEW} waiting, {many} over more"


def test_a_review_item_costs_the_same_whatever_its_revisions(admin: Client) -> None:
    """One asked-for question with many revisions before the one judged."""
    question = StudyQuestionFactory(choices=["3", "4"], answer="4")
    url = f"{REVIEW_URL}?question={question.pk}"

    def grow(n: int) -> None:
        for _ in range(n):
            revisions.make_current(
                ExplanationRevisionFactory(question=question, flags=["truncated"])
            )
        add_rows(n)

    grow(FEW)
    count(admin, url)
    few = count(admin, url)
    grow(MANY)
    many = count(admin, url)
    assert ExplanationRevision.objects.filter(question=question).count() == FEW + MANY
    assert many == few, f"{few} queries with {FEW} revisions, {many} with more"


@pytest.mark.parametrize("query", ["", "?candidate__exact=1", "?review_status__exact=unreviewed"])
def test_the_revision_list_costs_the_same_whatever_its_rows(admin: Client, query: str) -> None:
    few, many = counts(admin, REVISIONS_URL + query)
    assert many == few, f"{REVISIONS_URL + query}: {few} queries over {FEW}, {many} over more"


@pytest.mark.parametrize("url", [DASHBOARD_URL, DATA_URL], ids=["page", "json"])
def test_the_dashboard_costs_the_same_whatever_its_rows(admin: Client, url: str) -> None:
    few, many = counts(admin, url)
    assert QueueConsumer.objects.count() == GateLimit.objects.count() == FEW + MANY
    assert StudyQuestionJob.objects.count() == len(JobStatus.values) * (FEW + MANY)
    assert many == few, f"{url}: {few} queries over {FEW} of each, {many} over more"
