"""A session's figures from tagged questions, a cohort of 20 learners and one learner's two
sessions three days apart: the score, the seconds and the slow answer, per tag with its trend,
each question's difficulty, first tries and what is due; the learner's figures over both
sessions (the API and the admin page); the figures carried by the prompt and a summary that
states a wrong tag count or time flagged (the real test LLM server, the consumer's drain)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from studyqueue.models import SessionSummary, StudyQuestion, StudySession, Tag
from studyqueue.sessions import figures, recording, summaries
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "figures-token-0123456789"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
RIGHT, WRONG = 2, 1  # every question's key is its second choice


@pytest.fixture
def tagged(settings, llm_server):
    """Four questions: q-1 and q-2 tagged 문법, q-3 and q-4 어휘; 20 learners answered all
    four on 30 November (q-1 right 18 times, q-2 10, q-3 and q-4 20), in 10-29 seconds."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "VERIFY": False,
        "STEP_CHECK": False,
        "API_TOKENS": TOKEN,
    }
    grammar, words = Tag.objects.create(name="문법"), Tag.objects.create(name="어휘")
    for n in range(1, 5):
        question = StudyQuestionFactory(
            external_id=f"q-{n}", text=f"{n}번 질문", choices=["가", "나", "다"], answer="2"
        )
        question.tags.add(grammar if n <= 2 else words)
    for c in range(20):
        right = {1: c < 18, 2: c < 10, 3: True, 4: True}
        _record(
            f"c-{c:02}",
            "2026-11-30T09:00:00+09:00",
            [(n, RIGHT if right[n] else WRONG, 10 + c) for n in range(1, 5)],
        )
    return llm_server


def _line(learner: str, start: str, answers: list[tuple[int, int, int]]) -> dict:
    return {
        "external_id": f"{learner}-{start[:10]}",
        "learner": learner,
        "started_at": start,
        "ended_at": start.replace("T09:00", "T09:20"),
        "answers": [{"question": f"q-{n}", "chosen": c, "seconds": s} for n, c, s in answers],
    }


def _record(learner: str, start: str, answers: list[tuple[int, int, int]]) -> StudySession:
    return recording.record(recording.check(_line(learner, start, answers)))[0]


FIRST = [(1, WRONG, 20), (2, WRONG, 30), (3, RIGHT, 10)]  # 1 December
SECOND = [(1, RIGHT, 25), (2, WRONG, 20), (4, WRONG, 90)]  # 4 December, through the API

EXPECTED = {
    "right": 1,
    "total": 3,
    "percent": 33.3,
    "seconds": {"total": 135, "median": 25},
    "slow": [3],  # 90 s: over twice kim's median (22.5 s), and over the whole cohort's
    "tags": {
        "문법": {"right": 1, "total": 2, "trend": "up"},  # 0 of 2 on 1 December
        "어휘": {"right": 0, "total": 1, "trend": "down"},  # 1 of 1
    },
    # First answers: the cohort's 20 and kim's (q-1 and q-2 on 1 December, q-4 now).
    "difficulty": {"1": 0.86, "2": 0.48, "3": 0.95},
    "first_try": {"1": False, "2": False},
    # Missed now, then q-3 (right on 1 December: box 2, due two days later).
    "due": ["q-2", "q-4", "q-3"],
}


def test_a_sessions_figures_its_prompt_and_a_wrong_tag_count(tagged, client):
    _record("kim", "2026-12-01T09:00:00+09:00", FIRST)
    tagged.summary_answer = (
        "점수: 3문제 중 1문제 (33%)\n2번 문제와 3번 문제를 틀렸습니다.\n"
        "문법: 2문제 중 2문제 정답.\n어휘: 1문제 중 0문제 정답.\n3번 문제에 90초가 걸렸습니다."
    )
    posted = client.post(
        reverse("studyqueue:api-sessions"),
        _line("kim", "2026-12-04T09:00:00+09:00", SECOND),
        content_type="application/json",
        **AUTH,
    )
    assert posted.status_code == 201
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())
    summary = client.get(posted.json()["summary_url"], **AUTH).json()
    assert summary["status"] == "written"
    assert summary["figures"] == EXPECTED
    assert summary["flags"] == ["figure_mismatch"]  # 문법 is 1 of 2, not 2 of 2
    prompt = tagged.summary_prompts[-1]
    assert 'Tag "문법": 1 of 2 right, better than in the learner\'s previous session' in prompt
    assert "Time: 135 seconds in all, median 25 seconds" in prompt
    assert "Time: 90 seconds (slow for this learner or for this question)" in prompt
    assert "Learners right on their first try: 48%" in prompt
    learner = client.get(reverse("studyqueue:api-learner", args=["kim"]), **AUTH).json()
    assert learner["tags"] == {"문법": {"right": 1, "total": 4}, "어휘": {"right": 1, "total": 2}}
    assert [(s["right"], s["total"], s["summary"]) for s in learner["sessions"]] == [
        (1, 3, "written"),
        (1, 3, "none"),
    ]
    assert learner["sessions"][1]["tags"] == {
        "문법": {"right": 0, "total": 2},
        "어휘": {"right": 1, "total": 1},
    }
    # Due today: q-3 (box 2) on 3 December, q-2 and q-4 on 5 December, q-1 (box 2) on 6.
    assert learner["due"] == ["q-3", "q-2", "q-4", "q-1"]


def test_the_right_figures_pass_and_a_wrong_time_is_flagged(tagged):
    _record("kim", "2026-12-01T09:00:00+09:00", FIRST)
    session = _record("kim", "2026-12-04T09:00:00+09:00", SECOND)
    answers = summaries.answers_of(session)
    found = figures.of(session, summaries.scored(answers))
    assert found == EXPECTED
    fine = (
        "점수: 3문제 중 1문제 (33%)\n2번 문제와 3번 문제를 틀렸습니다.\n"
        "문법: 2문제 중 1문제 정답.\n어휘: 1문제 중 0문제 정답.\n"
        "총 2분 15초가 걸렸고, 3번 문제에 1분 30초가 걸렸습니다. 매일 10분씩 복습하세요."
    )
    assert summaries.check(fine, answers, found).flags == []
    wrong_time = fine.replace("총 2분 15초", "총 3분")
    assert summaries.check(wrong_time, answers, found).flags == ["figure_mismatch"]
    english = "Score: 1/3. Questions 2 and 3 were missed. 문법: 1 of 2 right. Median: 40 seconds."
    assert summaries.check(english, answers, found).flags == ["figure_mismatch"]
    # A tag figure it cannot read (no word says what it counts) is left unread.
    unread = "점수: 1/3. 2번, 3번 문제를 틀렸습니다. 문법 2/2."
    assert summaries.check(unread, answers, found).flags == []
    # Other learners' share (a question's difficulty) is not the score.
    cohort = (
        f"{fine}\n2번 문제는 다른 학습자의 48%가 맞힌 문제입니다. Other learners got 48% right."
    )
    assert summaries.check(cohort, answers, found).flags == []
    # A tag named with the reader's own words ("문제") owns no figure: the score is read.
    odd = {"tags": {"문제": {"right": 0, "total": 3}}}
    score = "점수: 3문제 중 1문제 (33%). 2번, 3번 문제를 틀렸습니다."
    assert summaries.check(score, answers, odd) == summaries.Checked(
        {"right": 1, "total": 3, "percent": 33}, []
    )


def test_few_learners_give_no_difficulty_and_a_new_learner_no_trend(tagged, settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "COHORT_MIN": 22}
    session = _record("lee", "2026-12-04T09:00:00+09:00", SECOND)
    found = figures.of(session, summaries.scored(summaries.answers_of(session)))
    assert found["difficulty"] == {"1": None, "2": None, "3": None}  # 21 learners each
    assert found["tags"]["문법"]["trend"] is None and found["first_try"] == {}
    assert found["due"] == ["q-2", "q-4"]
    StudyQuestion.objects.filter(external_id="q-4").delete()
    untimed = _record("lee", "2026-12-05T09:00:00+09:00", [(1, RIGHT, 0)])
    SessionAnswer = untimed.answers.model
    SessionAnswer.objects.filter(session=untimed).update(seconds=None)
    found = figures.of(untimed, summaries.scored(summaries.answers_of(untimed)))
    assert (found["seconds"], found["slow"], found["percent"]) == (None, [], 100.0)


def test_the_learner_api_and_page(tagged, client):
    _record("kim", "2026-12-01T09:00:00+09:00", FIRST)
    url = reverse("studyqueue:api-learner", args=["kim"])
    assert client.get(url).status_code == 401
    missing = client.get(reverse("studyqueue:api-learner", args=["nobody"]), **AUTH)
    assert (missing.status_code, missing.json()) == (404, {"errors": ["no learner nobody"]})
    assert client.post(url, {}, **AUTH).status_code == 405
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    listed = staff.get(reverse("admin:studyqueue_studysession_changelist"))
    page_url = reverse("admin:studyqueue_studysession_learner", args=["kim"])
    assert page_url in listed.content.decode()
    page = staff.get(page_url).content.decode()
    assert 'data-tag="문법"' in page and "0/2" in page and "q-1, q-2, q-3" in page
    unknown = reverse("admin:studyqueue_studysession_learner", args=["x"])
    assert staff.get(unknown).status_code == 404


def test_a_summary_page_shows_its_figures(tagged):
    session = _record("kim", "2026-12-04T09:00:00+09:00", SECOND)
    found = figures.of(session, summaries.scored(summaries.answers_of(session)))
    summary = SessionSummary.objects.create(session=session, text="점수: 1/3", figures=found)
    summaries.make_current(summary)
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = staff.get(reverse("admin:studyqueue_studysession_change", args=[session.pk]))
    shown = page.content.decode()
    assert 'id="sq-figures"' in shown and 'data-tag="어휘"' in shown
    assert "q-2, q-4" in shown
    exported = StringIO()
    call_command("exportsummaries", stdout=exported)
    rows = [json.loads(line) for line in exported.getvalue().splitlines()]
    assert [row["figures"]["due"] for row in rows if row["learner"] == "kim"] == [["q-2", "q-4"]]


def test_two_sessions_started_together_are_taken_in_the_order_recorded(tagged, settings):
    """Neither is the other's past twice: the first is the earlier, by its id."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "COHORT_MIN": 1}
    first = _record("kim", "2026-12-04T09:00:00+09:00", [(1, RIGHT, 20)])
    line = {**_line("kim", "2026-12-04T09:00:00+09:00", [(1, RIGHT, 20)]), "external_id": "b"}
    second = recording.record(recording.check(line))[0]
    mine = figures.of(first, summaries.scored(summaries.answers_of(first)))
    theirs = figures.of(second, summaries.scored(summaries.answers_of(second)))
    assert mine["first_try"] == {} and mine["tags"]["문법"]["trend"] is None
    assert theirs["first_try"] == {"1": True} and theirs["tags"]["문법"]["trend"] == "same"
    assert mine["difficulty"] == theirs["difficulty"] == {"1": 0.9}  # 18 + kim of 21... once
    assert theirs["due"] == []  # q-1 right twice: box 3


def test_the_checks_read_what_the_prompt_gives_and_no_more(tagged):
    """Times of the scored answers, a median in Korean, advice left alone, the score beside
    a tag's name, an impossible tag count, other learners' share."""
    session = _record("kim", "2026-12-04T09:00:00+09:00", SECOND)
    StudyQuestion.objects.filter(external_id="q-4").update(key_audit="disputed")
    answers = summaries.answers_of(session)  # q-4 under review: 45 s in all, median 22.5
    found = figures.of(session, summaries.scored(answers))
    assert found["seconds"] == {"total": 45, "median": 22.5}

    def flags(text: str, score: str = "점수: 2문제 중 1문제 (50%)\n2번 문제를 틀렸습니다.\n"):
        return summaries.check(score + text, answers, found).flags

    assert flags("총 45초가 걸렸습니다. 4번 문제에는 90초가 걸렸습니다.") == []
    assert flags("The median was 22.5 seconds.") == []
    assert flags("중앙값은 30초입니다.") == ["figure_mismatch"]
    for advice in (
        "하루 평균 10분씩 복습하세요.",
        "총 10분씩 매일 복습하세요.",
        "10분 동안 오답 노트를 써 보세요.",
        "Taking 10 minutes a day would help.",
        "In total, spend 15 minutes a day on it.",
    ):
        assert flags(advice) == [], advice
    missed = "Question 2 was missed."
    assert flags(f"Score: 1/2 (50%) with strong 문법 work. {missed}", score="") == []
    assert flags(f"문법 needs work, and overall you got 1 of 2 right. {missed}", score="") == []
    for impossible in ("문법은 3문제를 맞혔습니다.", "문법: 3문제 정답."):
        assert flags(impossible) == ["figure_mismatch"], impossible
    assert flags("2번 문제는 대부분의 학습자(48%)가 맞히는 문제입니다.") == []


def test_a_right_answer_moves_a_question_up_from_the_first_box():
    end = datetime(2026, 12, 1, 9, 20, tzinfo=UTC)
    right = [
        {"question__external_id": "q", "question_id": 1, "correct": True, "session__ended_at": end}
    ]
    assert figures.due(right, end + timedelta(days=1)) == []  # box 2: due in two days
    assert figures.due(right, end + timedelta(days=2)) == ["q"]
    assert figures.due([{**right[0], "correct": False}], end + timedelta(days=1)) == ["q"]
    assert figures.due(right * 6, end + timedelta(days=15)) == []  # box 5 at most: 16 days
    assert figures.due(right * 6, end + timedelta(days=16)) == ["q"]
