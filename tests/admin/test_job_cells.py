"""The job list's compact cells: status with stale badge and error code, and the "when" cell
(local times with seconds, the next try of a waiting job, the heartbeat age of a running one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from django.utils.html import strip_tags

from studyqueue.admin.common import stale_cutoff
from studyqueue.admin.job_cells import is_stale, state_cell, when_cell
from studyqueue.models import StudyQuestionJob

NOW = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)


def job(**fields: object) -> StudyQuestionJob:
    """An unsaved job: the cells read only its fields."""
    return StudyQuestionJob(
        **{"created_at": NOW - timedelta(minutes=3), "run_after": NOW, **fields}
    )


def when(j: StudyQuestionJob) -> str:
    return strip_tags(when_cell(j, NOW, stale_cutoff(NOW)))


def test_a_stale_job_has_its_badge_and_its_heartbeat_age_in_red(settings):
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "STALE_MINUTES": 10}
    stale = job(status="processing", started_at=NOW - timedelta(hours=3),
                heartbeat_at=NOW - timedelta(minutes=11))  # fmt: skip
    alive = job(status="processing", started_at=NOW - timedelta(minutes=2),
                heartbeat_at=NOW - timedelta(seconds=5))  # fmt: skip
    cutoff = stale_cutoff(NOW)
    assert is_stale(stale, cutoff) and not is_stale(alive, cutoff)
    assert ">stale</span>" in state_cell(stale, cutoff)
    assert "stale" not in state_cell(alive, cutoff)
    assert 'class="sq-late"' in when_cell(stale, NOW, cutoff)
    assert when(stale) == "started 09:00:05heartbeat 11m ago"
    assert when(alive) == "started 11:58:05heartbeat 5s ago"


def test_the_error_code_shows_under_the_status_with_its_meaning_on_hover():
    cell = state_cell(job(status="failed", error_code="llm_timeout"), NOW)
    assert 'title="LLM call timed out">llm_timeout</div>' in cell


def test_a_waiting_job_shows_its_next_try_and_a_due_one_how_long_it_waited():
    retrying = job(status="pending", run_after=NOW + timedelta(minutes=4, seconds=3))
    assert when(retrying) == "retry at 12:04:08in 4m"
    assert when(job(status="pending")) == "queued 11:57:05waiting 3m"


def test_a_finished_job_shows_start_end_and_duration_with_the_date_only_when_it_differs():
    today = job(status="completed", started_at=NOW - timedelta(seconds=9), completed_at=NOW)
    assert when(today) == "11:59:56→ 12:00:05 (9s)"
    overnight = job(status="failed", started_at=NOW - timedelta(days=2, hours=13),
                    completed_at=NOW - timedelta(days=1))  # fmt: skip
    assert when(overnight) == "Nov. 27, 2026, 23:00:05→ Nov. 29, 2026, 12:00:05 (37h 0m)"
    never_ran = job(status="skipped", completed_at=NOW)
    assert when(never_ran) == "queued 11:57:05ended 12:00:05"


@pytest.mark.parametrize("zone,shown", [("UTC", "11:59:56"), ("Asia/Seoul", "20:59:56")])
def test_times_are_local(settings, zone, shown):
    settings.TIME_ZONE = zone
    with timezone.override(zone):
        today = job(status="completed", started_at=NOW - timedelta(seconds=9), completed_at=NOW)
        assert when(today).startswith(shown)
