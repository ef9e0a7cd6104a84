"""Revisions: regeneration keeps the old text until the new one completes, a failed one
changes nothing, an older revision can be made current again; outdated explanations. Their
quality flags: scripts, lengths, cuts, stated answers; and on real replies from the test LLM
server."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.management import call_command
from django.urls import reverse

from studyqueue.explanations import answers, revisions
from studyqueue.explanations.prompts import current_version
from studyqueue.explanations.revisions import QualityFlag
from studyqueue.models import ExplanationRevision, FinishReason, StudyQuestion, StudyQuestionJob
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory

FIRST = "Because two and two make four, as counting on your fingers shows."
SECOND = "Two plus two is four: add one four times, starting from zero, and you reach four."


def explain_once(llm_server, make_consumer, answer: str, **server) -> StudyQuestion:  # type: ignore[no-untyped-def]
    llm_server.configure(answer=answer, **server)
    question = StudyQuestion.objects.first() or StudyQuestionFactory(text="What is 2 + 2?")
    enqueue(question)
    make_consumer().run_cycle()
    question.refresh_from_db()
    return question


@pytest.mark.django_db(transaction=True)
def test_regeneration_adds_a_revision_and_switches_only_when_complete(llm_server, make_consumer):
    question = explain_once(llm_server, make_consumer, FIRST)
    first = question.current_revision
    assert (question.explanation, first.text) == (FIRST, FIRST)
    assert question.explanation_prompt_version == first.prompt_version == current_version().hash
    # The regeneration's call is running: the old text is still the question's.
    llm_server.configure(answer=SECOND, delay=0.5)
    enqueue(question)
    consumer = make_consumer()
    import threading

    seen_during: list[str] = []

    def look() -> None:
        from django.db import connections

        from tests.helpers import wait_for

        try:
            wait_for(lambda: llm_server.stats()["active"] == 1, what="the regeneration call")
            seen_during.append(StudyQuestion.objects.get(pk=question.pk).explanation)
        finally:
            connections.close_all()

    watcher = threading.Thread(target=look)
    watcher.start()
    consumer.run_cycle()
    watcher.join()
    assert seen_during == [FIRST]
    question.refresh_from_db()
    assert question.explanation == SECOND
    assert list(question.revisions.values_list("text", flat=True)) == [SECOND, FIRST]


@pytest.mark.django_db(transaction=True)
def test_a_failed_regeneration_leaves_the_current_explanation_untouched(llm_server, make_consumer):
    question = explain_once(llm_server, make_consumer, FIRST)
    llm_server.configure(fault="400")
    job = enqueue(question).job
    make_consumer().run_cycle()
    job.refresh_from_db()
    question.refresh_from_db()
    assert (job.status, job.error_code) == ("failed", "llm_rejected")
    assert (question.explanation, question.revisions.count()) == (FIRST, 1)


@pytest.mark.django_db(transaction=True)
def test_an_older_revision_is_made_current_again_from_the_admin(
    llm_server, make_consumer, admin_client
):
    question = explain_once(llm_server, make_consumer, FIRST)
    explain_once(llm_server, make_consumer, SECOND)
    old = question.revisions.get(text=FIRST)
    response = admin_client.post(
        reverse("admin:studyqueue_explanationrevision_changelist"),
        {"action": "make_current", "_selected_action": [old.pk]},
        follow=True,
    )
    assert f"Revision {old.pk} is now the explanation" in response.content.decode()
    question.refresh_from_db()
    assert (question.explanation, question.current_revision_id) == (FIRST, old.pk)
    assert LogEntry.objects.filter(
        action_flag=CHANGE, object_id=str(question.pk), change_message__contains="revision"
    ).exists()
    page = admin_client.get(reverse("admin:studyqueue_studyquestion_change", args=[question.pk]))
    assert "(current)" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_outdated_explanations_are_found_filtered_and_regenerated(
    llm_server, make_consumer, settings, admin_client
):
    current = explain_once(llm_server, make_consumer, FIRST)
    old = StudyQuestionFactory(text="Old one?", explanation="Old text")
    StudyQuestion.objects.filter(pk=old.pk).update(explanation_prompt_version="abcdef012345")
    missing = StudyQuestionFactory(text="Not yet?")
    version = current_version().hash
    assert list(StudyQuestion.objects.outdated(version)) == [old]
    url = reverse("admin:studyqueue_studyquestion_changelist")
    for state, expected in (("current", current), ("outdated", old), ("missing", missing)):
        listed = admin_client.get(url, {"explanation": state}).context["cl"].result_list
        assert [q.pk for q in listed] == [expected.pk], state
    dashboard = admin_client.get(reverse("admin:studyqueue_queuedashboard_changelist"))
    assert dashboard.context["stats"].outdated == 1

    out = StringIO()
    call_command("enqueue", "--outdated", stdout=out)
    assert out.getvalue().strip() == "Created 1 explanation job(s); 0 already queued."
    call_command("enqueue", "--outdated", stdout=out)  # idempotent: one active job
    assert StudyQuestionJob.objects.filter(study_question=old, status="pending").count() == 1
    # Consumers restarted with another model make every explanation outdated (the live
    # consumers' version counts, not this shell's); --limit bounds the batch.
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "LLM_MODEL": "another-model"}
    make_consumer().run_cycle()  # regenerates the one queued, and reports its version
    out = StringIO()
    call_command("enqueue", "--outdated", "--limit", "5", stdout=out)
    assert out.getvalue().strip() == "Created 1 explanation job(s); 0 already queued."
    assert StudyQuestionJob.objects.filter(study_question=current, status="pending").exists()


@pytest.mark.django_db(transaction=True)
def test_explain_dry_run_prints_the_prompt_and_its_version(llm_server):
    question = StudyQuestionFactory(text="Capital of France?", choices=["Paris", "Rome"])
    out = StringIO()
    call_command("explain", str(question.pk), "--dry-run", stdout=out)
    text = out.getvalue()
    version = current_version()
    assert text.startswith(f"prompt version {version.hash} ({version.label})")
    assert "--- system\n" in text and "--- user\n" in text and "1. Paris\n2. Rome" in text
    assert llm_server.stats()["requests"] == 0
    assert not StudyQuestionJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_explain_runs_one_job_now_and_prints_the_result(llm_server):
    llm_server.configure(answer=FIRST)
    question = StudyQuestionFactory(text="What is 2 + 2?")
    out = StringIO()
    call_command("explain", str(question.pk), stdout=out)
    text = out.getvalue()
    assert text.startswith(FIRST)
    assert "tokens: prompt 42, completion 7" in text and "time to first token" in text
    question.refresh_from_db()
    assert question.explanation == FIRST and question.revisions.count() == 1
    job = StudyQuestionJob.objects.get()
    assert (job.status, job.worker_id.startswith("explain@")) == ("completed", True)


@pytest.mark.django_db(transaction=True)
def test_explain_refuses_what_it_cannot_do(llm_server):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no study question with id 424242"):
        call_command("explain", "424242")
    question = StudyQuestionFactory()
    enqueue(question)
    transitions.claim(worker_id="busy-consumer", limit=1)
    with pytest.raises(CommandError, match="being explained right now by busy-consumer"):
        call_command("explain", str(question.pk))


@pytest.mark.django_db(transaction=True)
def test_revisions_keep_their_metrics(llm_server, make_consumer):
    explain_once(llm_server, make_consumer, FIRST, word_delay=0.02)
    revision = ExplanationRevision.objects.get()
    assert (revision.prompt_tokens, revision.completion_tokens, revision.finish_reason) == (
        42,
        7,
        "stop",
    )
    assert revision.first_token_ms is not None
    # 6 tokens after the first over the ~0.22 s between the first word and the last.
    assert revision.tokens_per_second is not None and 10 < revision.tokens_per_second < 700
    # The job points at its reply and keeps its own LLM time; the reply's facts are here.
    assert revision.job is not None and revision.job.revision_id == revision.pk
    assert revision.job.llm_ms is not None and revision.job.llm_ms >= revision.first_token_ms


@pytest.mark.django_db(transaction=True)
def test_a_real_reply_records_its_cache_and_decode_rate(llm_server, make_consumer):
    """the server's cached count is kept, and the rate is the
    decode rate, (n - 1) tokens over the first-to-last span: 11 words 50 ms apart span
    500 ms as sent, so 20 tokens/s (the old formula gave 22, and thousands for a short
    reply). The bound is generous: a loaded client may read the first word late."""
    words = "one two three four five six seven eight nine ten eleven"
    explain_once(
        llm_server, make_consumer, words, word_delay=0.05, completion_tokens=11,
        prompt_tokens=300, cached_tokens=280,
    )  # fmt: skip
    revision = ExplanationRevision.objects.get()
    assert (revision.prompt_tokens, revision.cached_tokens) == (300, 280)
    assert revision.tokens_per_second is not None
    assert 1 < revision.tokens_per_second < 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("answer", "tokens", "whole"),
    [("Four.", 1, False), ("Four, as counting on your fingers shows.", 7, True)],
    ids=["one-token", "whole-json"],
)
def test_a_short_reply_has_no_decode_rate(llm_server, make_consumer, answer, tokens, whole):
    """One token has no decode time (it used to record thousands of tokens/s); a whole JSON
    reply comes at once, with no span to measure."""
    explain_once(llm_server, make_consumer, answer, completion_tokens=tokens, ignore_stream=whole)
    revision = ExplanationRevision.objects.get()
    assert revision.completion_tokens == tokens
    assert revision.tokens_per_second is None
    assert revision.cached_tokens is None  # the server did not say


@pytest.fixture
def no_checks(settings) -> None:  # type: ignore[no-untyped-def]
    """The flags a reply earns as it is stored: the checks' come after, from jobs of their
    own (tests/workers/test_verification.py, test_step_check.py)."""
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
    assert revisions.dominant_script(text) == script


def test_flags_for():
    assert revisions.flags_for(KOREAN, LONG_KOREAN, "stop") == []
    assert revisions.flags_for(KOREAN, LONG_ENGLISH, "stop") == ["wrong_script"]
    assert revisions.flags_for("Why?", "Because.", "length") == ["truncated", "too_short"]
    assert revisions.flags_for("2 + 2?", "4 " * 30, "stop") == []  # no letters: no script
    # Only "stop" is a finished answer; every other ending (or none) is flagged.
    for reason in ("content_filter", "tool_calls", "function_call", "abort", ""):
        assert revisions.flags_for(KOREAN, LONG_KOREAN, reason) == ["unfinished"], reason


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_checks")
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
@pytest.mark.usefixtures("no_checks")
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
@pytest.mark.usefixtures("no_checks")
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
    known, unknown = revisions.parse_flags(" truncated, too_long,,wrong_script , truncated")
    assert known == {QualityFlag.TRUNCATED, QualityFlag.WRONG_SCRIPT}
    assert unknown == ["too_long"]
    assert revisions.parse_flags("") == (set(), [])


def test_flags_and_finish_reasons_are_enums_stored_as_their_values():
    assert revisions.flags_for("Why?", "Because.", FinishReason.LENGTH) == [
        QualityFlag.TRUNCATED,
        QualityFlag.TOO_SHORT,
    ]
    assert revisions.flags_for("Why?", "x" * 50, FinishReason.NONE) == [QualityFlag.UNFINISHED]
    assert revisions.flags_for("Why?", "x" * 50, "something_new") == [QualityFlag.UNFINISHED]
    assert [flag.value for flag in revisions.FLAGS] == [
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
    assert set(revisions.MEANINGS) == set(revisions.FLAGS), "every flag says what it means"


CAPITALS = ["Busan", "Seoul", "Incheon"]
AGREEING = "Seoul has been the capital since 1948; Busan and Incheon are ports.\nAnswer: 2"


def test_the_answer_flags_come_from_the_agreement():
    agrees = answers.compare(AGREEING, CAPITALS, "Seoul")
    differs = answers.compare(AGREEING, CAPITALS, "Busan")
    unread = answers.compare("Seoul has been the capital since 1948.", CAPITALS, "Seoul")
    no_key = answers.compare("Seoul has been the capital since 1948.", CAPITALS, "")
    flags = [
        revisions.flags_for("Capital?", AGREEING, "stop", agreement=found)
        for found in (agrees, differs, unread, no_key, None)
    ]
    assert flags == [[], ["answer_mismatch"], ["no_answer_stated"], [], []]
    assert revisions.flags_for("Capital?", "Cut", "length", agreement=unread) == [
        "truncated",
        "too_short",
        "no_answer_stated",
    ], "a cut reply lost its answer line: truncated comes first, so it retries as truncated"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_checks")
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
@pytest.mark.usefixtures("no_checks")
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
@pytest.mark.usefixtures("no_checks")
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
