"""The Korean admin: every marked string has a Korean translation, the compiled catalogue
is its source's, pages asked for in Korean show no English the app wrote, and times are
local with seconds."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser

import polib
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from studyqueue.explanations import prompts, revisions
from studyqueue.models import (
    ErrorCode,
    FinishReason,
    JobKind,
    QueueConsumer,
    QueuePause,
    StudyQuestionJob,
)
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)
from tests.helpers import ROOT, catalogue
from tests.helpers.admin import DASHBOARD_URL, JOBS_URL, PAUSES_URL, QUESTIONS_URL

CATALOGUE = ROOT / "studyqueue" / "locale" / "ko" / "LC_MESSAGES"
HANGUL = re.compile("[\uac00-\ud7a3]")


def _extracted_msgids(tmp_path) -> set[str]:
    """The msgids ``makemessages`` finds in the app today."""
    return {entry.msgid for entry in catalogue.extract(tmp_path) if not entry.obsolete}


@pytest.mark.skipif(shutil.which("xgettext") is None, reason="needs GNU gettext (xgettext)")
def test_every_marked_string_has_a_korean_translation(tmp_path):
    shipped = polib.pofile(str(CATALOGUE / "django.po"))
    translated = {e.msgid for e in shipped.translated_entries() if not e.obsolete}
    missing = sorted(_extracted_msgids(tmp_path) - translated)
    assert not missing, f"marked but not translated into Korean (run `make messages`): {missing}"
    assert not shipped.fuzzy_entries(), "fuzzy entries are not shown: review and clear them"
    assert not [e.msgid for e in shipped.obsolete_entries()], "obsolete entries: drop them"


def test_the_translations_are_korean():
    for entry in polib.pofile(str(CATALOGUE / "django.po")).translated_entries():
        words = re.sub(
            r"%\(\w+\)[sdr]|%[sd]|<[^>]+>|\{[^}]*\}|[A-Z_]{2,}\w*|--[\w-]+", "", entry.msgid
        )
        if re.search("[a-z]{3,}", words):
            texts = list(entry.msgstr_plural.values()) if entry.msgid_plural else [entry.msgstr]
            assert all(HANGUL.search(text) for text in texts), entry.msgid


def test_the_compiled_catalogue_is_its_source():
    source = {(e.msgctxt, e.msgid): e for e in polib.pofile(str(CATALOGUE / "django.po"))}
    compiled = {(e.msgctxt, e.msgid): e for e in polib.mofile(str(CATALOGUE / "django.mo"))}
    assert compiled.keys() - {(None, "")} == {k for k, e in source.items() if e.translated()}
    for key, entry in compiled.items():
        if key != (None, ""):
            assert entry.msgstr == source[key].msgstr, key
            assert entry.msgstr_plural == source[key].msgstr_plural, key


# ---------------------------------------------------------------- pages asked for in Korean


# Apps whose text is translated: this one, and Django's own. Another installed app (the
# scheduler's) has no Korean of its own: its box on the admin index is not ours to judge.
TRANSLATED_APPS = {"studyqueue", "auth"}


def _other_app(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """An app's box on the admin index (``<div class="app-LABEL module">``) of another app."""
    classes = (dict(attrs).get("class") or "").split()
    labels = {c.removeprefix("app-") for c in classes if c.startswith("app-")}
    return tag == "div" and bool(labels) and not labels & TRANSLATED_APPS


class _VisibleText(HTMLParser):
    """The text a person reads: no scripts, styles or tag names; titles and placeholders
    (tooltips) included; not what is marked ``lang="en"`` (stored English data); not the
    sidebar, which lists every installed app's models, nor another app's box on the index."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hiding: str | None = None  # the tag whose content is hidden, while inside it
        self._depth = 0  # open tags of that name (they may nest)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._hiding:
            self._depth += tag == self._hiding
            return
        sidebar = tag == "nav" and ("id", "nav-sidebar") in attrs
        # A server's or the client's own words, stored as they were said and marked as
        # English (an LLM server's error): data, not the app's wording.
        english = tag == "span" and ("lang", "en") in attrs
        if tag in ("script", "style") or sidebar or english or _other_app(tag, attrs):
            self._hiding, self._depth = tag, 1
            return
        for name, value in attrs:
            if name in ("title", "placeholder", "aria-label") and value:
                self.parts.append(value)

    def handle_endtag(self, tag: str) -> None:
        if self._hiding and tag == self._hiding:
            self._depth -= 1
            if not self._depth:
                self._hiding = None

    def handle_data(self, data: str) -> None:
        if not self._hiding:
            self.parts.append(data)


# What may stay in Latin letters on a Korean page: names, units and identifiers.
ALLOWED = {
    "LLM",
    "URL",
    "CSV",
    "JSON",
    "API",
    "ID",
    "ms",
    "pid",
    "studyqueue",
    "Django",
    "PostgreSQL",
    "SQLite",
    "make",
    "run",
    "manage",
    "py",
    "runconsumer",
    "auto",  # GATE_PERMITS=auto, a setting value
    "UTC",
    "KST",
    "Asia",
    "Seoul",
    "admin",
    "ko",
    "en",
    "English",
    "Ctrl",  # keys, as printed on the keyboard
    "Enter",
    "Esc",
}


# Django's own admin text that its Korean catalogue does not translate yet (Django 6.1's
# action menu placeholder): not the app's to mark.
DJANGO_UNTRANSLATED = {"Select an option"}


def english_words(html: str, data: set[str]) -> list[str]:
    """Latin-letter words on a page that are neither data nor allowed names."""
    parser = _VisibleText()
    parser.feed(html)
    text = " ".join(parser.parts)
    for value in sorted({*data, *DJANGO_UNTRANSLATED}, key=len, reverse=True):
        text = text.replace(value, " ")
    # Prompt versions and other hashes, shown short ("de4a374"): identifiers, not words.
    text = re.sub(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b", " ", text)
    # Identifiers, as stored (a finish reason as the LLM server said it).
    codes = {*ErrorCode.values, *JobKind.values, *revisions.FLAGS, *FinishReason.values}
    words = set(re.findall(r"[A-Za-z][A-Za-z_]+", text))
    settings_names = {w for w in words if re.fullmatch(r"[A-Z]+(_[A-Z]+)+", w)}  # LLM_URL...
    return sorted(words - ALLOWED - codes - settings_names)


@pytest.fixture
def korean(client: Client, admin_user) -> Iterator[Client]:
    client.force_login(admin_user)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "ko"
    yield client
    # LocaleMiddleware leaves the request's language active on this thread.
    translation.deactivate()


@pytest.fixture
def queue_data(admin_user) -> dict[str, object]:
    now = timezone.now()
    question = StudyQuestionFactory(
        text="대한민국의 수도는?", choices=["서울", "부산"], answer="서울"
    )
    jobs = [
        StudyQuestionJobFactory(
            study_question=question,
            status="completed",
            completed_at=now,
            started_at=now - timedelta(seconds=3),
            llm_ms=2100,
        ),
        StudyQuestionJobFactory(
            study_question=StudyQuestionFactory(text="1 더하기 1은?"),
            status="failed",
            completed_at=now,
            error_code="llm_timeout",
            error_message="타임아웃",
        ),
        StudyQuestionJobFactory(
            study_question=StudyQuestionFactory(text="2 더하기 2는?"),
            status="processing",
            started_at=now,
            heartbeat_at=now - timedelta(hours=1),
        ),
        StudyQuestionJobFactory(study_question=StudyQuestionFactory(text="3 더하기 3은?")),
    ]
    # A regenerated explanation waiting for review: the review page shows it beside the
    # previous one; the question and revision pages list both.
    revisions.make_current(
        ExplanationRevisionFactory(question=question, text="서울입니다.", model="m-1")
    )
    revision = ExplanationRevisionFactory(
        question=question, text="정답: ① 서울", model="m-1", stated_answer="서울"
    )
    revisions.make_current(revision)
    QueuePause.objects.create(kind="", reason="점검", paused_by=admin_user.get_username())
    QueueConsumer.objects.create(
        worker_id="host-1",
        host="host",
        pid=1,
        started_at=now,
        seen_at=now,
        interval_seconds=60,
        llm_url="http://127.0.0.1:8080",
    )
    return {
        "jobs": jobs,
        "question": question,
        "revision": revision,
        "data": {
            "m-1",
            "host-1",
            "host",
            "http://127.0.0.1:8080",
            admin_user.get_username(),
            "admin",
            # A prompt version's label names its model and settings: data, not a phrase.
            prompts.current_version().label,
        },
    }


def _page_url(page: str, queue_data: dict[str, object]) -> str:
    jobs: list[StudyQuestionJob] = queue_data["jobs"]  # type: ignore[assignment]
    question, revision = queue_data["question"], queue_data["revision"]
    change = {
        "job": ("studyquestionjob", jobs[1]),
        "question": ("studyquestion", question),
        "revision": ("explanationrevision", revision),
    }
    if page in change:
        model, row = change[page]
        return reverse(f"admin:studyqueue_{model}_change", args=[row.pk])  # type: ignore[attr-defined]
    return {
        "index": reverse("admin:index"),
        "app": reverse("admin:app_list", args=["studyqueue"]),
        "dashboard": DASHBOARD_URL,
        "jobs": JOBS_URL,
        "pauses": PAUSES_URL,
        "pause_add": reverse("admin:studyqueue_queuepause_add"),
        "questions": QUESTIONS_URL,
        "question_add": reverse("admin:studyqueue_studyquestion_add"),
        "revisions": reverse("admin:studyqueue_explanationrevision_changelist"),
        "review": reverse("admin:studyqueue_explanationreview_changelist"),
    }[page]


KOREAN_PAGES = [
    "index",
    "app",
    "dashboard",
    "jobs",
    "job",
    "pauses",
    "pause_add",
    "questions",
    "question",
    "question_add",
    "revisions",
    "revision",
    "review",
]


@pytest.mark.django_db
@pytest.mark.parametrize("page", KOREAN_PAGES)
def test_a_page_asked_for_in_korean_has_no_english(korean, queue_data, page):
    url = _page_url(page, queue_data)
    response = korean.get(url)
    assert response.status_code == 200
    assert response.headers["Content-Language"] == "ko"
    found = english_words(response.content.decode(), queue_data["data"])
    assert not found, " ".join(found)


@pytest.mark.django_db
def test_times_are_local_with_seconds(korean, settings):
    settings.TIME_ZONE = "Asia/Seoul"
    when = timezone.now().replace(microsecond=0)
    job = StudyQuestionJobFactory(status="failed", completed_at=when, started_at=when)
    html = korean.get(reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])).content
    seoul = timezone.localtime(when, timezone.get_fixed_timezone(9 * 60))
    assert seoul.strftime("%H:%M:%S").encode() in html
    utc = when.astimezone(timezone.get_fixed_timezone(0)).strftime("%H:%M:%S")
    assert utc.encode() not in html


# ------------------------------------- codes made elsewhere, shown in Korean where shown

# The gate's change reasons (``services.gate_control.Reason``) and the quality flags:
# codes in the data and the logs, never on a Korean page or in a command's Korean output.
GATE_REASONS = ("climb", "step_back", "loss", "shared", "restored", "probe_down")
CODES = (*(str(flag) for flag in revisions.FLAGS), *GATE_REASONS)


def _codes_in(text: str) -> list[str]:
    return [code for code in CODES if re.search(rf"\b{code}\b", text)]


@pytest.fixture
def every_code(admin_user) -> None:
    """A revision with every flag, and a gate limit last changed for every reason."""
    from studyqueue.models import GateLimit

    question = StudyQuestionFactory(text="대한민국의 수도는?", choices=["서울", "부산"])
    for flag in revisions.FLAGS:
        ExplanationRevisionFactory(question=question, text="짧음", flags=[str(flag)])
    for n, reason in enumerate(GATE_REASONS):
        GateLimit.objects.create(endpoint=f"http://llm-{n}:8080/v1", limit=2, reason=reason)


@pytest.mark.django_db
def test_the_dashboard_shows_flags_and_gate_reasons_by_their_korean_labels(korean, every_code):
    response = korean.get(DASHBOARD_URL)
    parser = _VisibleText()
    parser.feed(response.content.decode())
    text = " ".join(parser.parts)
    assert not _codes_in(text), _codes_in(text)
    with translation.override("ko"):
        from studyqueue.admin.labels import GATE_REASONS as LABELS

        for reason in GATE_REASONS:
            assert str(LABELS[reason]) in text, reason
            assert HANGUL.search(str(LABELS[reason])), reason
        for flag in revisions.FLAGS:
            assert str(flag.label) in text and HANGUL.search(str(flag.label)), flag


@pytest.mark.django_db(transaction=True)
def test_explain_in_korean_shows_its_flags_by_their_labels(llm_server):
    from io import StringIO

    from django.core.management import call_command

    # An English one-word reply to a Korean question: too short, wrong script, no answer.
    llm_server.configure(answer="Seoul.")
    question = StudyQuestionFactory(text="대한민국의 수도는?", choices=["서울", "부산"])
    out = StringIO()
    with translation.override("ko"):
        call_command("explain", str(question.pk), stdout=out)
        label = str(revisions.QualityFlag.TOO_SHORT.label)
    text = out.getvalue()
    assert not _codes_in(text), text
    assert label in text


@pytest.mark.django_db
def test_studyqueue_health_in_korean_has_no_english_lines():
    from io import StringIO

    from django.core.management import call_command

    QueueConsumer.objects.create(
        worker_id="host-1",
        host="host",
        pid=1,
        started_at=timezone.now(),
        seen_at=timezone.now(),
        interval_seconds=60,
        llm_url="http://127.0.0.1:8080",
    )
    out = StringIO()
    with translation.override("ko"):
        call_command("studyqueue_health", "--db", "--consumer", stdout=out)
    text = out.getvalue().replace("host-1", "")
    # The check names (db, consumer: its options) stay; every sentence is Korean.
    words = set(re.findall(r"[A-Za-z][A-Za-z_]+", text)) - {"db", "consumer"}
    assert not words, text
    assert HANGUL.search(text)


# ---------------------------------------------------------- one time format per language

# Anything that looks like a date on a page, in any of the ways Django or Python write one.
DATE_LIKE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?"  # ISO, SHORT_DATETIME_FORMAT of old
    r"|\d{4}년 \d{1,2}월 \d{1,2}일(?: \d{1,2}:\d{2}(?::\d{2})?)?"
    r"|(?:Jan|Feb|March|April|May|June|July|Aug|Sept|Oct|Nov|Dec)\.? \d{1,2}, \d{4}"
    r"(?:, \d{1,2}:\d{2}(?::\d{2})?(?: [ap]\.m\.)?)?"
)
# The one format of each language (studyqueue/formats/<language>: DATETIME_FORMAT).
ONE_FORMAT = {
    "ko": re.compile(r"\d{4}년 \d{1,2}월 \d{1,2}일 \d{2}:\d{2}:\d{2}"),
    "en": re.compile(
        r"(?:Jan\.|Feb\.|March|April|May|June|July|Aug\.|Sept\.|Oct\.|Nov\.|Dec\.) "
        r"\d{1,2}, \d{4}, \d{2}:\d{2}:\d{2}"
    ),
}
TIMED_PAGES = [*KOREAN_PAGES, "consumers", "consumer", "pause"]


def _timed_url(page: str, queue_data: dict[str, object]) -> str:
    if page == "consumers":
        return reverse("admin:studyqueue_queueconsumer_changelist")
    if page == "consumer":
        consumer = QueueConsumer.objects.get(worker_id="host-1")
        return reverse("admin:studyqueue_queueconsumer_change", args=[consumer.pk])
    if page == "pause":
        return reverse("admin:studyqueue_queuepause_change", args=[QueuePause.objects.get().pk])
    return _page_url(page, queue_data)


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["ko", "en"])
@pytest.mark.parametrize("page", TIMED_PAGES)
def test_every_time_on_a_page_has_the_one_format(client, admin_user, queue_data, page, language):
    """Times from the database, from Django's own cells and from the app's code alike: one
    format per language, local, with seconds (never ``2026-12-01 14:17:29`` beside
    ``2026년 12월 1일 14:17:28``)."""
    from studyqueue.models import GateLimit

    when = timezone.now() - timedelta(days=2, seconds=7)  # another day: dates are shown
    QueueConsumer.objects.filter(worker_id="host-1").update(
        started_at=when, breaker_open=True, breaker_since=when, breaker_error="llm_timeout"
    )
    GateLimit.objects.create(endpoint="http://127.0.0.1:8080", limit=2, reason="climb")
    StudyQuestionJob.objects.update(created_at=when, run_after=when)
    client.force_login(admin_user)
    try:
        html = client.get(_timed_url(page, queue_data), HTTP_ACCEPT_LANGUAGE=language)
    finally:
        translation.deactivate()
    assert html.status_code == 200
    parser = _VisibleText()
    parser.feed(html.content.decode())
    text = " ".join(parser.parts)
    shown = DATE_LIKE.findall(text)
    wrong = [s for s in shown if not ONE_FORMAT[language].fullmatch(s)]
    assert not wrong, f"{page} ({language}): {wrong} beside {shown}"
    if page in ("dashboard", "job", "jobs", "consumers"):
        assert shown, f"{page} shows no time: the test would prove nothing"
