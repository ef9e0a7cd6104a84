"""When the waiting explanations will be done: an estimate from the pace of the explanation
jobs completed in the last ``WINDOW`` (docs/howto/exam-sets.md, "How the estimate is made")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.utils.translation import gettext

from studyqueue.models import JobKind, JobStatus, StudyQuestionJob

WINDOW = timedelta(minutes=10)
# A set's own rate is used once this many of its jobs completed in the window.
OWN_RATE_JOBS = 3


@dataclass(frozen=True)
class Rate:
    """What the servers did for explanations lately."""

    jobs_per_second: float  # explanations completed per second of wall time
    tokens_per_job: float | None  # completion tokens an explanation took (None: not reported)
    jobs: int  # explanation jobs completed in the window
    span: timedelta  # the time their work spanned (at most WINDOW)

    @property
    def tokens_per_second(self) -> float | None:
        """Completion tokens per second of wall time (None: the servers reported none)."""
        return None if self.tokens_per_job is None else self.jobs_per_second * self.tokens_per_job

    @property
    def usable(self) -> bool:
        """At least what its basis can show (1 tok/s, or 0.1 jobs/min): below that an estimate
        would read "at 0 tok/s"."""
        if self.tokens_per_second is None:
            return self.jobs_per_second * 60 >= 0.05
        return self.tokens_per_second >= 0.5

    def seconds_for(self, jobs: int) -> float:
        """Seconds ``jobs`` more explanations take at this rate."""
        return jobs / self.jobs_per_second

    @property
    def basis(self) -> str:
        """How the rate was measured: "at 38 tok/s over the last 4 min (12 jobs)"."""
        minutes = self.span.total_seconds() / 60
        over = (
            gettext("%(n)d min") % {"n": round(minutes)}
            if minutes >= 1
            else gettext("%(n)d s") % {"n": round(self.span.total_seconds())}
        )
        if self.tokens_per_second is None:
            return gettext(
                "at %(rate)s jobs/min over the last %(span)s (%(jobs)d jobs; no token counts "
                "reported)"
            ) % {"rate": f"{self.jobs_per_second * 60:.1f}", "span": over, "jobs": self.jobs}
        return gettext("at %(rate)s tok/s over the last %(span)s (%(jobs)d jobs)") % {
            "rate": f"{self.tokens_per_second:.0f}",
            "span": over,
            "jobs": self.jobs,
        }

    @classmethod
    def of(cls, now: datetime, question_ids: QuerySet[Any, Any] | None = None) -> Rate | None:
        """The rate of the explanation jobs (of ``question_ids``) completed in the ``WINDOW``."""
        explanations = StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION)
        if question_ids is not None:
            explanations = explanations.filter(study_question_id__in=question_ids)
        done = explanations.filter(completed_at__gte=now - WINDOW, status=JobStatus.COMPLETED)
        duration = ExpressionWrapper(
            F("completed_at") - F("started_at"), output_field=DurationField()
        )
        reported = Q(revision__completion_tokens__isnull=False)
        row = done.aggregate(
            jobs=Count("pk"),
            with_tokens=Count("pk", filter=reported),
            tokens=Sum("revision__completion_tokens", filter=reported),
            started=Min("started_at"),
            first_done=Min("completed_at"),
            took=Avg(duration),
        )
        jobs = row["jobs"]
        if not jobs or row["started"] is None:
            return None
        # Tokens for part of the jobs would count the others as free: by jobs then.
        tokens_known = row["with_tokens"] == jobs and bool(row["tokens"])
        per_job = row["tokens"] / jobs if tokens_known else None
        in_flight = explanations.filter(status=JobStatus.PROCESSING).count()
        span = max(now - row["started"], timedelta(seconds=1))
        took = row["took"].total_seconds() if row["took"] else 0.0
        if jobs > 2 * in_flight and jobs >= 2:
            # Enough completions to measure the pace itself: the jobs after the first
            # completion over the time since (a server that stopped lowers it as it grows).
            since_first = max(now - row["first_done"], timedelta(seconds=1))
            rate = (jobs - 1) / since_first.total_seconds()
        elif in_flight and took > 0:
            # Too few yet (a drain just started, its first replies in pairs at gate 2):
            # Little's law, the jobs in flight now over the time one takes from its claim to
            # its end (its wait at the gate included, as in flight counts those waiting).
            rate = in_flight / took
        else:
            rate = jobs / span.total_seconds()
        return cls(jobs_per_second=rate, tokens_per_job=per_job, jobs=jobs, span=span)


def rate_for(now: datetime, question_ids: QuerySet[Any, Any]) -> Rate | None:
    """The rate to estimate with: these questions' own once ``OWN_RATE_JOBS`` of their jobs
    completed in the window, else every explanation's."""
    own = Rate.of(now, question_ids)
    return own if own is not None and own.jobs >= OWN_RATE_JOBS else Rate.of(now)
