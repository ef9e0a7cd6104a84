"""What checking costs: the tokens and LLM time spent on key audits and blind verification
beside those spent writing explanations, per prompt version.

Tokens are read from the attempts (each records what its calls reported); LLM time from the
completed jobs. An explanation and its verification count under the prompt version of the
revision; a key audit under the prompt version of its question's current explanation (the
audit runs before it), or under none while the question has none.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet, Sum

from studyqueue.models import JobAttempt, JobKind, JobStatus, StudyQuestionJob

# Where each kind's prompt version is read from, on a job.
_VERSION = {
    JobKind.EXPLANATION: "revision__prompt_version",
    JobKind.VERIFICATION: "revision__prompt_version",
    JobKind.KEY_AUDIT: "study_question__explanation_prompt_version",
}
CHECKS = (JobKind.KEY_AUDIT, JobKind.VERIFICATION)


@dataclass
class KindCost:
    """One job kind's spending: attempts that got replies, their tokens, the LLM's time."""

    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: int = 0


@dataclass
class VersionCost:
    """A prompt version's explanations and the checks spent on them."""

    prompt_version: str
    kinds: dict[str, KindCost]

    def of(self, kind: str) -> KindCost:
        return self.kinds.get(kind, KindCost())

    @property
    def checking(self) -> KindCost:
        """The key audits and verifications together."""
        total = KindCost()
        for kind in CHECKS:
            cost = self.of(kind)
            total.attempts += cost.attempts
            total.prompt_tokens += cost.prompt_tokens
            total.completion_tokens += cost.completion_tokens
            total.llm_ms += cost.llm_ms
        return total

    @property
    def token_share(self) -> float | None:
        """Checking's generated tokens over the explanations' (None before any): what the
        server spends its time on. A verifier's prompt holds the explanation, so its prompt
        tokens are about the explanation's own; the server reads them many times faster
        than it writes (``time_share`` has both)."""
        written = self.of(JobKind.EXPLANATION).completion_tokens
        return self.checking.completion_tokens / written if written else None

    @property
    def time_share(self) -> float | None:
        """Checking's LLM time over the explanations' (None before any explanation)."""
        written = self.of(JobKind.EXPLANATION).llm_ms
        return self.checking.llm_ms / written if written else None


def _newest_edge(queryset: QuerySet[Any], newest: int | None) -> int:
    """The smallest id among the ``newest`` rows (0: all): an id range, no count."""
    if newest is None:
        return 0
    edge = queryset.order_by("-pk").values_list("pk", flat=True)[newest - 1 : newest]
    return edge.first() or 0


def collect(newest_jobs: int | None = None) -> dict[str, VersionCost]:
    """Every prompt version's spending by job kind (a version ``""``: audits of questions
    not explained yet), over all jobs or the ``newest_jobs`` (the dashboard's window)."""
    found: dict[str, dict[str, KindCost]] = defaultdict(dict)
    first_job = _newest_edge(StudyQuestionJob.objects.all(), newest_jobs)
    for kind, version in _VERSION.items():
        replied = JobAttempt.objects.filter(
            job__kind=kind, job_id__gte=first_job, completion_tokens__isnull=False
        )
        for row in (
            replied.order_by()
            .values(f"job__{version}")
            .annotate(
                attempts=Count("id"),
                prompt=Sum("prompt_tokens"),
                completion=Sum("completion_tokens"),
            )
        ):
            cost = found[row[f"job__{version}"] or ""].setdefault(kind, KindCost())
            cost.attempts = row["attempts"]
            cost.prompt_tokens = row["prompt"] or 0
            cost.completion_tokens = row["completion"] or 0
        jobs = StudyQuestionJob.objects.filter(
            kind=kind, status=JobStatus.COMPLETED, pk__gte=first_job
        ).order_by()
        for row in jobs.values(version).annotate(ms=Sum("llm_ms")):
            cost = found[row[version] or ""].setdefault(kind, KindCost())
            cost.llm_ms = row["ms"] or 0
    return {version: VersionCost(version, kinds) for version, kinds in found.items()}
