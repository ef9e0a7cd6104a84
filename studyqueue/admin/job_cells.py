"""The job list's compact cells: a job's state with why (status, stale, error code) and its
times in one "when" cell, so that the list fits a laptop screen with the admin's sidebar open."""

from __future__ import annotations

from datetime import datetime

from django.utils import formats, timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from studyqueue import times
from studyqueue.admin.common import ATTEMPT_COLOURS, badge, status_badge
from studyqueue.models import ErrorCode, JobStatus, Outcome, StudyQuestionJob


def local_time(moment: datetime, since: datetime) -> str:
    """``moment`` in local time with seconds; the date too unless it is ``since``'s day."""
    local = timezone.localtime(moment)
    if local.date() == timezone.localtime(since).date():
        return formats.time_format(local, "TIME_FORMAT")
    return times.shown(local)


def is_stale(job: StudyQuestionJob, cutoff: datetime) -> bool:
    """Processing with its last heartbeat before ``cutoff`` (what the *stale* filter shows)."""
    return (
        job.status == JobStatus.PROCESSING
        and job.heartbeat_at is not None
        and job.heartbeat_at < cutoff
    )


def state_cell(job: StudyQuestionJob, cutoff: datetime) -> SafeString:
    """The status badge, a *stale* badge, and the error code (its meaning on hover)."""
    cell = status_badge(job.status)
    if is_stale(job, cutoff) and job.heartbeat_at is not None:
        since = gettext("No heartbeat since %(time)s") % {"time": times.shown(job.heartbeat_at)}
        colour = ATTEMPT_COLOURS[Outcome.STALE]
        cell += format_html(" {}", badge(gettext("stale"), colour, since))
    if job.error_code:
        label = ErrorCode(job.error_code).label if job.error_code in ErrorCode.values else ""
        cell += format_html(
            '<div class="sq-sub sq-code" title="{}">{}</div>', label, job.error_code
        )
    return cell


def _times(message: str, **moments: str) -> SafeString:
    """A translated ``message`` whose times (``%(name)s``) never break inside."""
    return mark_safe(conditional_escape(message) % {name: _time(t) for name, t in moments.items()})


def _time(time: str) -> SafeString:
    """A time (or a duration) that never breaks inside."""
    return format_html('<span class="sq-time">{}</span>', time)


def _lines(title: str, *lines: str) -> SafeString:
    """Short lines (each wraps only between its words); the full times on hover."""
    inner = format_html_join("", '<span class="sq-line">{}</span>', ((line,) for line in lines))
    return format_html('<span class="sq-when" title="{}">{}</span>', title, inner)


def when_cell(job: StudyQuestionJob, now: datetime, cutoff: datetime) -> SafeString:
    """When the job was queued, started and ended, and what it waits for."""
    queued = _times(gettext("queued %(time)s"), time=local_time(job.created_at, now))
    if job.status == JobStatus.PENDING:
        if job.run_after > now:
            return _lines(
                gettext("queued %(time)s") % {"time": times.shown(job.created_at)},
                _times(gettext("retry at %(time)s"), time=local_time(job.run_after, now)),
                _times(gettext("in %(age)s"), age=times.short_duration(job.run_after - now)),
            )
        age = times.short_duration(now - job.created_at)
        return _lines(
            times.shown(job.created_at), queued, _times(gettext("waiting %(age)s"), age=age)
        )
    if job.status == JobStatus.PROCESSING and job.started_at is not None:
        started = _times(gettext("started %(time)s"), time=local_time(job.started_at, now))
        if job.heartbeat_at is None:
            return _lines(times.shown(job.started_at), started)
        since = times.short_duration(now - job.heartbeat_at)
        beat = _times(gettext("heartbeat %(age)s ago"), age=since)
        if is_stale(job, cutoff):
            beat = format_html('<span class="sq-late">{}</span>', beat)
        return _lines(times.shown(job.started_at), started, beat)
    ended = job.completed_at
    if ended is None:
        return _lines(times.shown(job.created_at), queued)
    if job.started_at is None:  # skipped before it ran
        ended_at = _times(gettext("ended %(time)s"), time=local_time(ended, now))
        return _lines(times.shown(ended), queued, ended_at)
    took = times.short_duration(ended - job.started_at)
    return _lines(
        f"{times.shown(job.started_at)} → {times.shown(ended)}",
        _time(local_time(job.started_at, now)),
        # The end's date only when it is not the start's.
        _times(gettext("→ %(time)s (%(age)s)"), time=local_time(ended, job.started_at), age=took),
    )
