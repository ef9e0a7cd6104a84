"""A job's attempts as a timeline on its page: when each started and ended, how long it took,
which worker ran it, how it ended and why, its reply's tokens and time to first token."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from studyqueue import times
from studyqueue.admin.common import ATTEMPT_COLOURS, badge, excerpt
from studyqueue.admin.job_cells import local_time
from studyqueue.models import ErrorCode, JobAttempt, Outcome, StudyQuestionJob
from studyqueue.queue.transitions import attempts_of

# A job's page lists at most its last this many attempts (a job retried by operators again
# and again has no bound of its own).
SHOWN = 100
MESSAGE_EXCERPT = 80


def _row(attempt: JobAttempt, now: datetime) -> dict[str, Any]:
    started, ended = attempt.started_at, attempt.ended_at
    code, outcome = attempt.error_code, attempt.outcome
    prompt, completion = attempt.prompt_tokens, attempt.completion_tokens
    tokens = " → ".join("?" if n is None else str(n) for n in (prompt, completion))
    first_token = attempt.first_token_ms
    label = Outcome(outcome).label if outcome in Outcome.values else _("Running")
    return {
        "number": attempt.number,
        "started": local_time(started, now),
        "started_full": times.shown(started),
        "ended": local_time(ended, started) if ended is not None else "-",
        "took": times.short_duration((ended or now) - started),
        "worker": attempt.worker_id or "-",
        "outcome": badge(str(label), ATTEMPT_COLOURS.get(outcome, ATTEMPT_COLOURS[""])),
        "error_code": code,
        "error_meaning": ErrorCode(code).label if code in ErrorCode.values else "",
        "message": excerpt(attempt.error_message, MESSAGE_EXCERPT),
        "message_full": attempt.error_message,
        "tokens": tokens if prompt is not None or completion is not None else "-",
        "first_token": "-" if first_token is None else gettext("%(ms)d ms") % {"ms": first_token},
    }


def timeline(job: StudyQuestionJob) -> SafeString:
    """The job's attempts as a small table, first to last (the last ``SHOWN``)."""
    rows = attempts_of(job.pk, last=SHOWN + 1)
    first_shown = None
    if len(rows) > SHOWN:
        rows = rows[1:]
        first_shown = rows[0].number
    now = timezone.now()
    return render_to_string(
        "admin/studyqueue/attempt_timeline.html",
        {"rows": [_row(a, now) for a in rows], "first_shown": first_shown},
    )
