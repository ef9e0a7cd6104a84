"""What checking costs (``explanations/check_cost.py``): attempts' tokens and jobs' LLM time
by kind, under the prompt version of the explanation; the dashboard's window of newest jobs."""

from __future__ import annotations

import pytest
from django.utils import timezone

from studyqueue.explanations import check_cost
from studyqueue.models import JobAttempt, JobKind
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)

pytestmark = pytest.mark.django_db


def spent(kind: str, revision, tokens: tuple[int, int], llm_ms: int):  # type: ignore[no-untyped-def]
    job = StudyQuestionJobFactory(
        study_question=revision.question, kind=kind, status="completed", llm_ms=llm_ms,
        revision=revision if kind != JobKind.KEY_AUDIT else None, completed_at=timezone.now(),
    )  # fmt: skip
    JobAttempt.objects.create(
        job=job, number=1, started_at=timezone.now(), ended_at=timezone.now(),
        outcome="completed", prompt_tokens=tokens[0], completion_tokens=tokens[1],
    )  # fmt: skip
    return job


def test_checking_is_counted_beside_the_explanations_per_prompt_version():
    question = StudyQuestionFactory(explanation_prompt_version="v1")
    revision = ExplanationRevisionFactory(question=question, prompt_version="v1")
    spent(JobKind.KEY_AUDIT, revision, (300, 30), 400)
    spent(JobKind.EXPLANATION, revision, (500, 400), 8000)
    spent(JobKind.VERIFICATION, revision, (900, 10), 600)
    cost = check_cost.collect()["v1"]
    written = cost.of(JobKind.EXPLANATION)
    assert written.prompt_tokens + written.completion_tokens == 900
    assert (cost.checking.prompt_tokens, cost.checking.completion_tokens) == (1200, 40)
    assert cost.token_share == pytest.approx(40 / 400)  # generated tokens
    assert cost.time_share == pytest.approx(1000 / 8000)


def test_the_dashboards_window_counts_only_the_newest_jobs():
    old = ExplanationRevisionFactory(prompt_version="old")
    spent(JobKind.EXPLANATION, old, (10, 10), 100)
    new = ExplanationRevisionFactory(prompt_version="new")
    spent(JobKind.EXPLANATION, new, (20, 20), 200)
    spent(JobKind.VERIFICATION, new, (30, 3), 30)
    assert set(check_cost.collect()) == {"old", "new"}
    window = check_cost.collect(newest_jobs=2)
    assert set(window) == {"new"}
    assert window["new"].of(JobKind.VERIFICATION).completion_tokens == 3
