"""What checking costs: the tokens (from the attempts) and LLM time (from the completed jobs)
of key audits, blind verification and step checks beside the explanations', per prompt
version. A key audit counts under its question's current explanation's version, or none."""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import astuple, dataclass

from django.db.models import Count, Sum

from studyqueue.explanations.prompt_versions import newest_edge
from studyqueue.models import CHECK_KINDS, JobAttempt, JobKind, JobStatus, StudyQuestionJob

# Where a kind's prompt version is read from, on a job: its revision's (the one it wrote or
# checked), but a key audit's, which has none, is its question's explanation's.
_VERSION = {JobKind.KEY_AUDIT: "study_question__explanation_prompt_version"}


@dataclass
class KindCost:
    """One job kind's spending: attempts that got replies, their tokens, the LLM's time."""

    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: int = 0

    def __add__(self, other: KindCost) -> KindCost:
        return KindCost(*map(operator.add, astuple(self), astuple(other)))


@dataclass
class VersionCost:
    """A prompt version's explanations and the checks spent on them."""

    prompt_version: str
    kinds: dict[str, KindCost]

    def of(self, kind: str) -> KindCost:
        return self.kinds.get(kind, KindCost())

    @property
    def checking(self) -> KindCost:
        """The key audits, verifications and step checks together."""
        return sum((self.of(kind) for kind in CHECK_KINDS), KindCost())

    @property
    def token_share(self) -> float | None:
        """Checking's generated tokens over the explanations' (None before any)."""
        written = self.of(JobKind.EXPLANATION).completion_tokens
        return self.checking.completion_tokens / written if written else None

    @property
    def time_share(self) -> float | None:
        """Checking's LLM time over the explanations' (None before any explanation)."""
        written = self.of(JobKind.EXPLANATION).llm_ms
        return self.checking.llm_ms / written if written else None


def collect(newest_jobs: int | None = None) -> dict[str, VersionCost]:
    """Every prompt version's spending by job kind, over all jobs or the ``newest_jobs``."""
    found: dict[str, dict[str, KindCost]] = defaultdict(dict)
    first_job = newest_edge(StudyQuestionJob.objects.all(), newest_jobs)
    for kind in (JobKind.EXPLANATION, *CHECK_KINDS):
        version = _VERSION.get(kind, "revision__prompt_version")
        replied = JobAttempt.objects.filter(
            job__kind=kind, job_id__gte=first_job, completion_tokens__isnull=False
        )
        sums = {"prompt": Sum("prompt_tokens"), "completion": Sum("completion_tokens")}
        for row in replied.order_by().values(f"job__{version}").annotate(n=Count("id"), **sums):
            cost = KindCost(row["n"], row["prompt"] or 0, row["completion"] or 0)
            found[row[f"job__{version}"] or ""][kind] = cost
        jobs = StudyQuestionJob.objects.filter(
            kind=kind, status=JobStatus.COMPLETED, pk__gte=first_job
        ).order_by()
        for row in jobs.values(version).annotate(ms=Sum("llm_ms")):
            found[row[version] or ""].setdefault(kind, KindCost()).llm_ms = row["ms"] or 0
    return {version: VersionCost(version, kinds) for version, kinds in found.items()}


def of(costs: dict[str, VersionCost], version: str) -> VersionCost:
    """``version``'s spending in ``collect``'s answer (none spent: an empty one)."""
    return costs.get(version) or VersionCost(version, {})
