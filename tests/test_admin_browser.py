"""The admin in a real browser: Playwright driving Debian's Chromium against a live server.

Screenshots land in artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections

from studyqueue.models import StudyQuestionJob
from tests.conftest import ROOT
from tests.factories import StudyQuestionJobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

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


@pytest.fixture
def browser_page(monkeypatch):
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
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(15_000)
        yield page
        browser.close()
        # Inside Playwright's loop the ORM got connections of its own (asgiref keys them
        # by context): close them, or the test database cannot be dropped at the end.
        connections.close_all()


def test_operator_logs_in_filters_failed_jobs_retries_them_and_opens_the_dashboard(
    live_server, browser_page
):
    User.objects.create_superuser("operator", "op@example.com", "correct-horse")
    failed = StudyQuestionJobFactory.create_batch(
        3, status="failed", error_code="llm_timeout", error_message="no reply in 300s", attempts=3
    )
    StudyQuestionJobFactory.create_batch(2, status="completed", llm_ms=1800)
    StudyQuestionJobFactory(status="pending")
    page = browser_page

    page.goto(f"{live_server.url}/admin/login/?next=/admin/studyqueue/studyquestionjob/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct-horse")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    page.screenshot(path=str(SHOTS / "01-job-list.png"), full_page=True)

    page.click("#changelist-filter a[href*='status__exact=failed']")
    page.wait_for_url("**status__exact=failed**")
    assert page.locator("#result_list tbody tr").count() == 3
    page.screenshot(path=str(SHOTS / "02-failed-filter.png"), full_page=True)

    page.check("#action-toggle")
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    assert "Retried 3 job(s)." in page.inner_text("ul.messagelist")
    page.goto(f"{live_server.url}/admin/studyqueue/studyquestionjob/?status__exact=pending")
    assert page.locator("#result_list tbody tr").count() == 4
    assert page.locator("#result_list .sq-badge", has_text="Pending").count() == 4
    page.screenshot(path=str(SHOTS / "03-after-retry.png"), full_page=True)

    page.click("text=Queue dashboard")
    page.wait_for_selector("#sq-status-kind")
    pending_row = page.locator("#sq-status-kind tr[data-status=pending] td").nth(2)
    assert pending_row.inner_text().strip() == "4"
    page.screenshot(path=str(SHOTS / "04-dashboard.png"), full_page=True)

    assert {j.status for j in StudyQuestionJob.objects.filter(pk__in=[f.pk for f in failed])} == {
        "pending"
    }
