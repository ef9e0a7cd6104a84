"""Quality flags: scripts, lengths, cuts; and on real replies from the test LLM server."""

from __future__ import annotations

import pytest

from studyqueue.explanations import answers, quality
from studyqueue.explanations.quality import QualityFlag
from studyqueue.models import ExplanationRevision, FinishReason, StudyQuestion
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory


@pytest.fixture(autouse=True)
def _no_verifier(settings) -> None:  # type: ignore[no-untyped-def]
    """The flags a reply earns as it is stored: the blind verifier's come after, from a job
    of their own (tests/workers/test_verification.py)."""
    settings.STUDYQUEUE = {
        **getattr(settings, "STUDYQUEUE", {}),
        "VERIFY": False,
        "STEP_CHECK": False,
    }


KOREAN = "대한민국의 수도는 어디입니까?"
LONG_ENGLISH = "Seoul has been the capital of South Korea since the country was founded."
LONG_KOREAN = "서울은 대한민국이 세워진 이후로 줄곧 수도였습니다. 그래서 정답은 서울입니다."


@pytest.mark.parametrize(
    "text,script",
    [
        (KOREAN, "HANGUL"),
        ("What is 2 + 2?", "LATIN"),
        ("東京は日本の首都です", "CJK"),
        ("Столица России — Москва", "CYRILLIC"),
        ("2 + 2 = 4 !", None),
        # Counted letter by letter, repeats included; a tie goes to the script seen first.
        ("서울 Seoul", "LATIN"),
        ("서울서울서울 Seoul", "HANGUL"),
        ("ab 가나", "LATIN"),
        ("가나 ab", "HANGUL"),
    ],
)
def test_dominant_script(text, script):
    assert quality.dominant_script(text) == script


def test_flags_for():
    assert quality.flags_for(KOREAN, LONG_KOREAN, "stop") == []
    assert quality.flags_for(KOREAN, LONG_ENGLISH, "stop") == ["wrong_script"]
    assert quality.flags_for("Why?", "Because.", "length") == ["truncated", "too_short"]
    assert quality.flags_for("2 + 2?", "4 " * 30, "stop") == []  # no letters: no script
    # Only "stop" is a finished answer; every other ending (or none) is flagged.
    for reason in ("content_filter", "tool_calls", "function_call", "abort", ""):
        assert quality.flags_for(KOREAN, LONG_KOREAN, reason) == ["unfinished"], reason


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "question,answer,fault,flags",
    [
        (KOREAN, LONG_ENGLISH, "", ["wrong_script"]),
        (KOREAN, LONG_KOREAN, "", []),
        ("What is 2 + 2?", "Four.", "", ["too_short"]),
        ("What is 2 + 2?", LONG_ENGLISH, "length", ["truncated"]),
        ("What is 2 + 2?", LONG_ENGLISH, "filter", ["unfinished"]),
        ("What is 2 + 2?", LONG_ENGLISH, "noreason", ["unfinished"]),
    ],
)
@pytest.mark.parametrize("ignore_stream", [False, True], ids=["stream", "whole-json"])
def test_real_replies_are_flagged(
    llm_server, make_consumer, question, answer, fault, flags, ignore_stream
):
    llm_server.configure(answer=answer, fault=fault, ignore_stream=ignore_stream)
    enqueue(StudyQuestionFactory(text=question))
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    stored = StudyQuestion.objects.get()
    assert stored.explanation_flags == flags
    assert ExplanationRevision.objects.get().flags == flags
    assert list(StudyQuestion.objects.flagged()) == ([stored] if flags else [])
    assert list(StudyQuestion.objects.needs_review()) == [stored]  # unreviewed, flagged or not


@pytest.mark.django_db(transaction=True)
def test_a_reply_without_a_finish_reason_keeps_its_ending_on_the_revision(
    llm_server, make_consumer
):
    llm_server.configure(answer=LONG_ENGLISH, fault="noreason")  # [DONE] came, no reason
    enqueue(StudyQuestionFactory(text="Why is Seoul the capital?"))
    make_consumer().run_cycle()
    revision = ExplanationRevision.objects.get()
    assert (revision.finish_reason, revision.flags) == ("", ["unfinished"])
    question = StudyQuestion.objects.get()
    assert (question.current_revision.truncated, question.explanation_flags) == (
        False,
        ["unfinished"],
    )
    assert list(StudyQuestion.objects.flagged()) == [question]


@pytest.mark.django_db(transaction=True)
def test_unfinished_is_a_flag_quality_retry_accepts(llm_server, settings, make_consumer):
    from django.core.management import call_command

    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "QUALITY_RETRY": "unfinished"}
    call_command("check")  # E008 would refuse an unknown flag
    llm_server.configure(answer=LONG_ENGLISH, fault="filter")
    enqueue(StudyQuestionFactory(text="Why is Seoul the capital?"))
    assert make_consumer().run_cycle().outcomes == {"retrying": 1, "completed": 1}
    assert [body["max_tokens"] for body in llm_server.bodies] == [1024, 1024]
    assert [r.finish_reason for r in ExplanationRevision.objects.order_by("pk")] == [
        "content_filter",
        "content_filter",
    ]


def test_quality_retry_is_parsed_once_into_flags_and_unknown_names():
    known, unknown = quality.parse_flags(" truncated, too_long,,wrong_script , truncated")
    assert known == {QualityFlag.TRUNCATED, QualityFlag.WRONG_SCRIPT}
    assert unknown == ["too_long"]
    assert quality.parse_flags("") == (set(), [])


def test_flags_and_finish_reasons_are_enums_stored_as_their_values():
    assert quality.flags_for("Why?", "Because.", FinishReason.LENGTH) == [
        QualityFlag.TRUNCATED,
        QualityFlag.TOO_SHORT,
    ]
    assert quality.flags_for("Why?", "x" * 50, FinishReason.NONE) == [QualityFlag.UNFINISHED]
    assert quality.flags_for("Why?", "x" * 50, "something_new") == [QualityFlag.UNFINISHED]
    assert [flag.value for flag in quality.FLAGS] == [
        "truncated",
        "unfinished",
        "too_short",
        "wrong_script",
        "answer_mismatch",
        "no_answer_stated",
        "question_changed",
        "verifier_disagrees",
        "verifier_unsure",
        "wrong_step",
        "step_check_unsure",
    ]
    assert set(quality.MEANINGS) == set(quality.FLAGS), "every flag says what it means"


CAPITALS = ["Busan", "Seoul", "Incheon"]
AGREEING = "Seoul has been the capital since 1948; Busan and Incheon are ports.\nAnswer: 2"


def test_the_answer_flags_come_from_the_agreement():
    agrees = answers.compare(AGREEING, CAPITALS, "Seoul")
    differs = answers.compare(AGREEING, CAPITALS, "Busan")
    unread = answers.compare("Seoul has been the capital since 1948.", CAPITALS, "Seoul")
    no_key = answers.compare("Seoul has been the capital since 1948.", CAPITALS, "")
    flags = [
        quality.flags_for("Capital?", AGREEING, "stop", agreement=found)
        for found in (agrees, differs, unread, no_key, None)
    ]
    assert flags == [[], ["answer_mismatch"], ["no_answer_stated"], [], []]
    assert quality.flags_for("Capital?", "Cut", "length", agreement=unread) == [
        "truncated",
        "too_short",
        "no_answer_stated",
    ], "a cut reply lost its answer line: truncated comes first, so it retries as truncated"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "reply,key,flags,stated",
    [
        (AGREEING, "Seoul", [], "2"),
        (AGREEING, "B", [], "2"),
        (
            AGREEING.replace("Answer: 2", "정답은 ①번입니다"),
            "Seoul",
            ["answer_mismatch"],
            "①번입니다",
        ),
        (AGREEING.replace("\nAnswer: 2", ""), "Seoul", ["no_answer_stated"], ""),
        (AGREEING.replace("\nAnswer: 2", ""), "", [], ""),  # no key: nothing to compare
    ],
)
def test_real_replies_state_their_answer(llm_server, make_consumer, reply, key, flags, stated):
    llm_server.configure(answer=reply)
    enqueue(StudyQuestionFactory(text="Capital of Korea?", choices=CAPITALS, answer=key))
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    revision = ExplanationRevision.objects.get()
    assert (revision.flags, revision.stated_answer) == (flags, stated)
    assert StudyQuestion.objects.get().explanation_flags == flags


KOREAN_CITIES = ["부산", "서울", "인천"]
KOREAN_BODY = "서울은 대한민국이 세워진 이후로 줄곧 수도였고, 부산은 항구 도시입니다."


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "question,choices,key,reply,flags,stated",
    [
        # A distractor discussed after the answer line is not the stated answer.
        (
            KOREAN,
            KOREAN_CITIES,
            "부산",
            KOREAN_BODY + "\n정답: ②\n오답 ①: 부산은 정답 아님",
            ["answer_mismatch"],
            "②",
        ),
        (
            "Capital of Korea?",
            CAPITALS,
            "Busan",
            AGREEING + "\nStudents often say the answer is Busan.",
            ["answer_mismatch"],
            "2",
        ),
        # A negated answer line, or one naming two answers, states none.
        (KOREAN, KOREAN_CITIES, "서울", KOREAN_BODY + "\n정답: ② 아님", ["no_answer_stated"], ""),
        (
            "Capital of Korea?",
            CAPITALS,
            "Seoul",
            AGREEING.replace("Answer: 2", "Answer: B and C"),
            ["no_answer_stated"],
            "B and C",
        ),
        # The right answer in markup agrees.
        (KOREAN, KOREAN_CITIES, "서울", KOREAN_BODY + "\n**정답:**\n<b>②</b>", [], "②"),
    ],
    ids=["distractor-ko", "distractor-en", "negated-ko", "two-answers-en", "markup-ko"],
)
def test_only_a_plain_statement_is_stored_as_the_answer(
    llm_server, make_consumer, question, choices, key, reply, flags, stated
):
    llm_server.configure(answer=reply)
    enqueue(StudyQuestionFactory(text=question, choices=choices, answer=key))
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    revision = ExplanationRevision.objects.get()
    assert (revision.flags, revision.stated_answer) == (flags, stated)
    assert StudyQuestion.objects.get().explanation_flags == flags


@pytest.mark.django_db(transaction=True)
def test_answer_mismatch_is_a_flag_quality_retry_accepts(llm_server, settings, make_consumer):
    from django.core.management import call_command

    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "QUALITY_RETRY": "answer_mismatch,no_answer_stated",
    }
    call_command("check")  # E008 would refuse an unknown flag
    llm_server.configure(answer=AGREEING)
    enqueue(StudyQuestionFactory(text="Capital of Korea?", choices=CAPITALS, answer="Busan"))
    assert make_consumer().run_cycle().outcomes == {"retrying": 1, "completed": 1}
    assert [body["max_tokens"] for body in llm_server.bodies] == [1024, 1024]
    first, second = ExplanationRevision.objects.order_by("pk")
    assert first.flags == second.flags == ["answer_mismatch"], "retried once, then kept"
    assert StudyQuestion.objects.get().current_revision == second


def test_a_stated_answer_longer_than_its_column_is_cut(db):
    from studyqueue.explanations import revisions
    from studyqueue.explanations.prompts import PromptVersion
    from studyqueue.models import width
    from studyqueue.services.llm import LLMReply
    from tests.factories import StudyQuestionJobFactory

    job = StudyQuestionJobFactory()
    reply = LLMReply("x", "m", "stop", prompt_tokens=1, completion_tokens=1, elapsed_ms=1)
    revision = revisions.add(
        job, job.study_question_id, reply, PromptVersion("h", "l"), [], stated_answer="2" * 999
    )
    revision.refresh_from_db()
    assert revision.stated_answer == "2" * width(ExplanationRevision, "stated_answer")
