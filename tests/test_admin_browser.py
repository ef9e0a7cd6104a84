"""The admin in a real browser, against what ``make run`` starts: ``manage.py serve`` (gunicorn,
static files by WhiteNoise, the consumer) in a process of its own, not Django's test server.

Playwright drives Debian's Chromium. Every page must have the admin's stylesheet applied: a
page served without its CSS fails. Screenshots land in artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from studyqueue.models import JobAttempt, StudyQuestionJob
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers import ROOT, busy_day, clock, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

CHROMIUM = os.environ.get("STUDYQUEUE_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "artifacts" / "screenshots"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OPERATOR, PASSWORD = "operator", "correct-horse-battery"
# The admin's header colour (--header-bg) when its stylesheet is applied.
STYLED_HEADER = "rgb(65, 118, 144)"


@contextlib.contextmanager
def serving(env: dict[str, str], python: str, port: int, log: Path | None = None) -> Iterator[str]:
    """``manage.py serve`` on a free port, on the test database; its base URL. ``log``: a file
    for its log lines (else they go where the test's go)."""
    env = {
        **env,
        "DJANGO_SUPERUSER_USERNAME": OPERATOR,
        "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
        "DJANGO_SUPERUSER_EMAIL": "op@example.com",
        "STUDYQUEUE_LLM_URL": f"http://127.0.0.1:{port}/v1",  # no LLM: jobs wait
    }
    bind = f"127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    with contextlib.ExitStack() as stack:
        stderr = stack.enter_context(log.open("w")) if log is not None else None
        proc = subprocess.Popen(
            [python, "manage.py", "serve", "--bind", bind, "--web-workers", "1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        url = f"http://{bind}"
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert f"Admin: {url}/admin/ (log in as '{OPERATOR}')" in first, first

            def answers() -> bool:
                try:
                    with urllib.request.urlopen(f"{url}/admin/login/", timeout=2) as reply:
                        return reply.status == 200
                except OSError:
                    return False

            wait_for(answers, timeout=30, interval=0.1, what="the web server")
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
    assert proc.returncode == 0, "serve stops cleanly on SIGTERM"


@pytest.fixture
def site(child_env, python, free_port) -> Iterator[str]:
    with serving(child_env, python, free_port) as url:
        yield url


@pytest.fixture
def idle_site(child_env, python, free_port, tmp_path) -> Iterator[str]:
    """``serve`` whose consumer has run its first cycle and runs no other for an hour unless
    a job is ready: the rows a test writes next (stale ones too) stay as written."""
    log = tmp_path / "serve.log"
    env = {**child_env, "LOG_LEVEL": "INFO", "STUDYQUEUE_INTERVAL_SECONDS": "3600"}
    with serving(env, python, free_port, log) as url:
        wait_for(
            lambda: "study_consumer_cycle" in log.read_text(),
            timeout=30,
            interval=0.1,
            what="the consumer's first cycle",
        )
        yield url


@pytest.fixture
def page(monkeypatch):  # type: ignore[no-untyped-def]
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        if os.environ.get("STUDYQUEUE_REQUIRE_BROWSER"):
            pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop on this thread; the test's own ORM calls
    # are still plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": 1400, "height": 900})
        tab.set_default_timeout(15_000)
        yield tab
        browser.close()
        # Inside Playwright's loop the ORM got connections of its own: close them, or the
        # test database cannot be dropped at the end.
        connections.close_all()


def assert_styled(tab, what: str) -> None:  # type: ignore[no-untyped-def]
    """The admin's stylesheet was served and applied to this page."""
    sheets = tab.evaluate(
        "[...document.styleSheets].filter(s => s.href && s.href.includes('/static/admin/css/'))"
        ".map(s => { try { return s.cssRules.length } catch (e) { return 0 } })"
    )
    assert sheets and all(rules > 0 for rules in sheets), f"{what}: admin CSS not loaded"
    header = tab.evaluate("getComputedStyle(document.querySelector('#header')).backgroundColor")
    assert header == STYLED_HEADER, f"{what}: the header is not styled ({header})"


def test_the_served_admin_is_styled_on_every_studyqueue_page(site, page):
    question = StudyQuestionFactory(text="What is 2 + 2?", explanation="Because " * 5000)
    job = StudyQuestionJobFactory(study_question=question, status="completed", llm_ms=1800)

    page.goto(f"{site}/admin/login/?next=/admin/")
    assert_styled(page, "login")
    page.screenshot(path=str(SHOTS / "00-login.png"), full_page=True)
    page.fill("#id_username", OPERATOR)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")

    pages = {
        "01-index": "/admin/",
        "02-app-index": "/admin/studyqueue/",
        "03-job-list": reverse("admin:studyqueue_studyquestionjob_changelist"),
        "04-job-page": reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]),
        "05-question-list": reverse("admin:studyqueue_studyquestion_changelist"),
        "06-question-page": reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
        "07-question-add": reverse("admin:studyqueue_studyquestion_add"),
        "08-dashboard": reverse("admin:studyqueue_queuedashboard_changelist"),
    }
    for name, path in pages.items():
        page.goto(f"{site}{path}")
        assert_styled(page, name)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    # The explanation's full text, behind the link on the question's page.
    page.goto(f"{site}{pages['06-question-page']}")
    page.click("text=the full text")
    assert page.inner_text("body").startswith("Because Because")


def log_in(tab, site: str, path: str) -> None:  # type: ignore[no-untyped-def]
    tab.goto(f"{site}/admin/login/?next={path}")
    tab.fill("#id_username", OPERATOR)
    tab.fill("#id_password", PASSWORD)
    tab.click("input[type=submit]")


def a_job_of_every_kind_of_row() -> dict[str, StudyQuestionJob]:
    """Jobs whose cells are the widest the list shows: long questions (Korean too), every
    status, long error codes, a stale job, a waiting retry, a job finished yesterday."""
    now = timezone.now()
    long = (
        "In the passage about the separation of powers in the 1787 constitution, which of "
        "the following statements best describes the role of the judiciary?"
    )
    korean = "다음 중 조선 시대 훈민정음 창제의 목적과 가장 관련이 깊은 설명으로 옳은 것은?"
    ago = lambda **kw: now - timedelta(**kw)  # noqa: E731
    rows = {
        "completed": dict(
            status="completed", attempts=1, started_at=ago(seconds=40),
            completed_at=ago(seconds=31), llm_ms=8900,
        ),
        "yesterday": dict(
            status="completed", attempts=2, started_at=ago(days=1, minutes=3),
            completed_at=ago(days=1), llm_ms=123_400,
        ),
        "failed": dict(
            status="failed", attempts=3, error_code="llm_server_error",
            error_message="502 Bad Gateway", started_at=ago(days=2, hours=3),
            completed_at=ago(days=2),
        ),
        "retrying": dict(
            status="pending", attempts=1, error_code="question_changed",
            run_after=now + timedelta(minutes=5),
        ),
        "running": dict(
            status="processing", attempts=2, started_at=ago(minutes=2),
            heartbeat_at=ago(seconds=5), worker_id="host-1:4242",
        ),
        "stale": dict(
            # Started yesterday, whatever the time of day: its "started" line carries the
            # date, the widest the "when" column gets.
            status="processing", attempts=3, started_at=ago(days=1, hours=3),
            heartbeat_at=ago(hours=2), worker_id="host-2:4242",
        ),
        "skipped": dict(
            status="skipped", kind="session_summary", error_code="unsupported_kind",
            completed_at=ago(minutes=1),
        ),
    }  # fmt: skip
    jobs = {}
    for n, (name, fields) in enumerate(rows.items()):
        question = StudyQuestionFactory(text=korean if n % 2 else long)
        jobs[name] = StudyQuestionJobFactory(study_question=question, **fields)
    return jobs


# How far the job list reaches past its box: the results box (which scrolls sideways when
# the table is wider), the change list, the page, the last column's right edge against the
# results box and the window.
OVERFLOW_JS = """() => {
    const results = document.querySelector('#changelist .results');
    const changelist = document.querySelector('#changelist');
    const last = document.querySelector('#result_list thead th:last-child');
    const edge = (element) => element.getBoundingClientRect().right;
    return {
        results: results.scrollWidth - results.clientWidth,
        changelist: changelist.scrollWidth - changelist.clientWidth,
        page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        last_column: edge(last) - Math.min(edge(results), document.documentElement.clientWidth),
    };
}"""


# How far the job page's timeline reaches past its fieldset (which clips it) and the window.
TIMELINE_OVERFLOW_JS = """() => {
    const last = document.querySelector('table.sq-timeline thead th:last-child');
    const fieldset = document.querySelector('fieldset:has(table.sq-timeline)');
    const right = (element) => element.getBoundingClientRect().right;
    return {
        fieldset: right(last) - right(fieldset),
        page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    };
}"""


def test_the_job_list_fits_1400px_and_a_job_page_shows_its_attempts(idle_site, page):
    jobs = a_job_of_every_kind_of_row()
    log_in(page, idle_site, reverse("admin:studyqueue_studyquestionjob_changelist"))
    page.wait_for_selector("#result_list")
    assert_styled(page, "job list")
    assert page.is_visible("#nav-sidebar"), "the admin's nav sidebar is open"
    assert page.is_visible("#changelist-filter"), "the filters are shown"
    assert page.viewport_size == {"width": 1400, "height": 900}
    page.screenshot(path=str(SHOTS / "13-job-list-1400.png"), full_page=True)

    overflow = page.evaluate(OVERFLOW_JS)
    assert all(px <= 0 for px in overflow.values()), f"px past the edge: {overflow}"

    def row(name: str):  # type: ignore[no-untyped-def]
        link = f"a[href$='/studyquestionjob/{jobs[name].pk}/change/']"
        return page.locator("#result_list tbody tr", has=page.locator(link))

    def text(name: str) -> str:
        return row(name).inner_text()

    def badges(name: str) -> list[str]:
        return row(name).locator(".sq-badge").all_inner_texts()

    assert badges("stale") == ["Processing", "stale"] and "heartbeat 2h 0m ago" in text("stale")
    assert badges("running") == ["Processing"]
    assert re.search(r"heartbeat \d+s ago", text("running"))
    assert "retry at" in text("retrying") and "question_changed" in text("retrying")
    assert "(9s)" in text("completed") and "8.9s" in text("completed")
    assert "llm_server_error" in text("failed")

    # The failed job's page: its three attempts as a timeline (rows as the queue writes them).
    failed = jobs["failed"]
    # The last attempt starts just before a local midnight and ends after it: its end shows
    # its date too, and the table must still fit (as it must whatever the time of day).
    start = timezone.localtime(failed.started_at).replace(hour=23, minute=59, second=30)
    JobAttempt.objects.bulk_create(
        JobAttempt(
            job=failed, number=n, worker_id=f"ip-10-0-12-{n}.eu-west-1.compute.internal:4242",
            started_at=start - timedelta(minutes=30 * (3 - n)),
            ended_at=start - timedelta(minutes=30 * (3 - n), seconds=-41 * n),
            outcome="failed" if n == 3 else "retrying", error_code="llm_server_error",
            error_message="the LLM server answered 502 Bad Gateway: upstream model worker crashed",
            prompt_tokens=412 if n == 2 else None, completion_tokens=3 if n == 2 else None,
            first_token_ms=230 if n == 2 else None,
        )
        for n in (1, 2, 3)
    )  # fmt: skip
    page.goto(f"{idle_site}{reverse('admin:studyqueue_studyquestionjob_change', args=[failed.pk])}")
    page.wait_for_selector("table.sq-timeline")
    assert page.locator("table.sq-timeline tbody tr").count() == 3
    assert page.locator("table.sq-timeline .sq-badge").all_inner_texts() == [
        "Retrying", "Retrying", "Failed",
    ]  # fmt: skip
    past = page.evaluate(TIMELINE_OVERFLOW_JS)
    assert all(px <= 0 for px in past.values()), f"px past the edge: {past}"
    page.screenshot(path=str(SHOTS / "14-job-page.png"), full_page=True)
    page.locator("fieldset:has(table.sq-timeline)").screenshot(path=str(SHOTS / "15-timeline.png"))


def test_operator_filters_failed_jobs_retries_them_and_opens_the_dashboard(site, page):
    failed = StudyQuestionJobFactory.create_batch(
        3, status="failed", error_code="llm_timeout", error_message="no reply in 300s", attempts=3
    )
    StudyQuestionJobFactory.create_batch(2, status="completed", llm_ms=1800)
    StudyQuestionJobFactory(status="pending", run_after="2999-01-01T00:00:00Z")

    log_in(page, site, "/admin/studyqueue/studyquestionjob/")
    page.wait_for_selector("#result_list")

    page.click("#changelist-filter a[href*='status__exact=failed']")
    page.wait_for_url("**status__exact=failed**")
    assert page.locator("#result_list tbody tr").count() == 3
    page.screenshot(path=str(SHOTS / "10-failed-filter.png"), full_page=True)

    page.check("#action-toggle")
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    assert "Retried 3 job(s)." in page.inner_text("ul.messagelist")
    assert_styled(page, "after the action")
    page.screenshot(path=str(SHOTS / "11-after-retry.png"), full_page=True)

    page.click("text=Queue dashboard")
    page.wait_for_selector("#sq-status-kind")
    assert_styled(page, "dashboard")
    page.screenshot(path=str(SHOTS / "12-dashboard.png"), full_page=True)
    retried = StudyQuestionJob.objects.filter(pk__in=[f.pk for f in failed])
    # Retried jobs went back to pending; with no LLM server the consumer hands them back (it
    # may hold one at this moment: SQLite's consumer looks for ready jobs every second).
    assert {j.error_code for j in retried} <= {"", "llm_unavailable"}
    assert {j.status for j in retried} <= {"pending", "processing"}
    # A claim counts its attempt while the job runs; the hand-back gives it back.
    counted = {j.pk: (j.status, j.attempts) for j in retried}
    assert all(n == (1 if status == "processing" else 0) for status, n in counted.values()), (
        f"an unreachable server costs no attempt: {counted}"
    )


def test_a_reviewer_works_through_the_queue_with_the_keyboard(site, page):
    from studyqueue.explanations import revisions
    from studyqueue.models import ExplanationRevision, StudyQuestion
    from tests.factories import ExplanationRevisionFactory

    questions, judged = [], []
    for n, text in enumerate(("대한민국의 수도는?", "What is 2 + 2?", "Capital of France?")):
        question = StudyQuestionFactory(text=text, choices=["A", "B"], answer="A")
        if n == 0:  # a regenerated one: its previous revision shows beside it
            revisions.make_current(ExplanationRevisionFactory(question=question, text="Old one."))
        revision = ExplanationRevisionFactory(question=question, text=f"Explanation {n}.")
        revisions.make_current(revision)
        questions.append(question)
        judged.append(revision)
    first, second, third = questions

    def showing(question: StudyQuestion) -> None:
        page.wait_for_selector(f"#sq-review[data-question='{question.pk}']")

    log_in(page, site, "/admin/studyqueue/explanationreview/")
    showing(first)
    assert_styled(page, "review")
    assert page.inner_html(".sq-diff-old") == "<del>Old one.</del>"
    assert page.inner_html(".sq-diff-new") == "<ins>Explanation 0.</ins>"
    page.screenshot(path=str(SHOTS / "20-review.png"), full_page=True)

    page.keyboard.press("a")  # approve: the next waiting question opens
    showing(second)
    assert "approved" in page.inner_text("ul.messagelist")
    page.keyboard.press("j")
    showing(third)
    page.keyboard.press("k")
    showing(second)
    page.keyboard.press("r")  # reject: a regeneration is queued
    showing(third)
    assert "regeneration job" in page.inner_text("ul.messagelist")
    page.keyboard.press("e")
    box = page.locator("#sq-edit-text")
    box.press("Control+a")
    box.type("Paris: a j k r e typed here are text.")  # not shortcuts while typing
    page.screenshot(path=str(SHOTS / "21-review-edit.png"), full_page=True)
    box.press("Control+Enter")
    page.wait_for_selector("#sq-review-empty")
    assert "correction" in page.inner_text("ul.messagelist")

    statuses = [ExplanationRevision.objects.get(pk=r.pk).review_status for r in judged]
    assert statuses == ["approved", "rejected", "edited"]
    third = StudyQuestion.objects.get(pk=third.pk)
    assert third.explanation == "Paris: a j k r e typed here are text."
    assert third.current_revision.author == OPERATOR
    # The reject queued its regeneration, its unaudited key's audit first.
    jobs = StudyQuestionJob.objects.filter(study_question=second)
    assert sorted(jobs.values_list("kind", flat=True)) == ["explanation", "key_audit"]


def test_the_dashboard_fits_a_1400_px_screen_at_a_glance(site, page):
    """no horizontal scroll with the sidebar open, the main content within
    about two screens, one row of 24 bars per hourly metric with its values as text."""
    now = timezone.now()
    busy_day.make(now)
    page.goto(f"{site}/admin/login/?next=/admin/studyqueue/queuedashboard/")
    page.fill("#id_username", OPERATOR)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#sq-charts")
    assert_styled(page, "dashboard")
    assert page.is_visible("#nav-sidebar"), "measured with the sidebar open"

    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"horizontal scroll: {width[0]} px wide in {width[1]}"
    height = page.evaluate("document.querySelector('#content-main').scrollHeight")
    assert height <= 2 * 900, f"the dashboard is {height} px tall (two screens: 1800)"

    for chart in ("sq-throughput", "sq-llm", "sq-ttft", "sq-tps"):
        assert page.locator(f"#{chart} .sq-strip .sq-col").count() == 24, chart
        label = page.get_attribute(f"#{chart} .sq-strip", "aria-label")
        assert label and ":00: " in label, chart
    # This hour's bar by its label: the newest, unless the page came after the hour turned.
    hour = timezone.localtime(clock.hour_of(now)).strftime("%H:00")
    newest = page.locator(f'#sq-throughput .sq-col[title^="{hour}: "]')
    assert newest.get_attribute("title") == f"{hour}: 1 / 0"  # the value on hover
    assert newest.bounding_box()["width"] < 40  # thin bars in one row
    # 30 waiting, and no completion of the last ten minutes with its tokens: no estimate.
    assert page.inner_text("#sq-backlog .n") == "\u2013"  # an en dash: no figure
    assert "no estimate yet" in page.inner_text("#sq-backlog .l")
    assert page.inner_text("#sq-cached .n") == "75 %"
    assert "4" in page.inner_text("#sq-gate-limit .n")
    assert page.is_visible("#sq-consumer-records")  # to the records, to remove gone ones
    page.screenshot(path=str(SHOTS / "30-dashboard.png"), full_page=True)

    # The JSON view still refreshes the page body.
    page.wait_for_function(
        "old => document.querySelector('#sq-updated-at').getAttribute('datetime') !== old",
        arg=page.get_attribute("#sq-updated-at", "datetime"),
        timeout=15_000,
    )
    assert page.locator("#sq-throughput .sq-col").count() == 24
