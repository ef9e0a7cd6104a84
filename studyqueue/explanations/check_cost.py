"""What checking costs: the tokens (from the attempts) and LLM time (from the completed jobs)
of key audits, blind verification and step checks beside the explanations', per prompt
version. A key audit counts under its question's current explanation's version, or none."""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import astuple, dataclass

from django.db.models import Count, Sum
from django.db.models.functions import Coalesce

from studyqueue.explanations.prompt_versions import newest_edge
from studyqueue.models import CHECK_KINDS, JobAttempt, JobKind, JobStatus, StudyQuestionJob


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
        replied = JobAttempt.objects.filter(
            job__kind=kind, job_id__gte=first_job, completion_tokens__isnull=False
        )
        sums = replied.order_by().values(v=_version("job__"))
        for row in sums.annotate(n=Count("id"), p=Sum("prompt_tokens"), c=Sum("completion_tokens")):
            found[row["v"] or ""][kind] = KindCost(row["n"], row["p"] or 0, row["c"] or 0)
        jobs = StudyQuestionJob.objects.filter(
            kind=kind, status=JobStatus.COMPLETED, pk__gte=first_job
        ).order_by()
        for done in jobs.values(v=_version()).annotate(ms=Sum("llm_ms")):
            found[done["v"] or ""].setdefault(kind, KindCost()).llm_ms = done["ms"] or 0
    return {version: VersionCost(version, kinds) for version, kinds in found.items()}


def _version(job: str = "") -> Coalesce:
    """A job's prompt version: its revision's (the one it wrote or checked), or for a job
    with none (a key audit), its question's explanation's."""
    return Coalesce(
        f"{job}revision__prompt_version", f"{job}study_question__explanation_prompt_version"
    )


def of(costs: dict[str, VersionCost], version: str) -> VersionCost:
    """``version``'s spending in ``collect``'s answer (none spent: an empty one)."""
    return costs.get(version) or VersionCost(version, {})
