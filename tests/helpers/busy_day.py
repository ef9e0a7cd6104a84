"""A day of work for the dashboard (the browser test's screenshot, and the check that it
buckets the same whatever the minute): completions with their replies' timings every other
hour, failures, a backlog that cannot start yet, consumers live and gone, an adaptive gate."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.helpers import clock

# Completions in the bucket that many hours before now's: 1 + hours_ago % 5 each.
COMPLETED_HOURS = range(0, 24, 2)
FAILED_HOURS_AGO = 3


def completions_in(hours_ago: int) -> int:
    return 1 + hours_ago % 5 if hours_ago in COMPLETED_HOURS else 0


def make(now: datetime) -> None:
    """The day up to ``now``; each hour's jobs inside its own bucket (``clock.in_hour``),
    so the newest bar holds this hour's completion at any minute."""
    from studyqueue.models import GateLimit
    from tests.factories import (
        ExplanationRevisionFactory,
        QueueConsumerFactory,
        StudyQuestionJobFactory,
    )

    for hours_ago in COMPLETED_HOURS:
        count = completions_in(hours_ago)
        for n in range(count):
            revision = ExplanationRevisionFactory(
                first_token_ms=300 + 40 * hours_ago,
                tokens_per_second=30 + hours_ago,
                prompt_tokens=400,
                cached_tokens=300,
            )
            StudyQuestionJobFactory(
                study_question=revision.question,
                status="completed",
                completed_at=clock.in_hour(now, hours_ago, share=(n + 1) / (count + 1)),
                llm_ms=2000 + 100 * n,
                revision=revision,
            )
    StudyQuestionJobFactory.create_batch(
        2,
        status="failed",
        error_code="llm_timeout",
        completed_at=clock.in_hour(now, FAILED_HOURS_AGO),
    )
    StudyQuestionJobFactory.create_batch(30, status="pending", run_after="2999-01-01T00:00:00Z")
    url = "http://127.0.0.1:8080/v1"
    QueueConsumerFactory(
        worker_id="gpu-box:4242",
        gate_permits="auto",
        gate_limit=4,
        llm_url=url,
        model="mlx-community/Qwen2.5-7B-Instruct-4bit",
        prompt_version="3f9a1c2d4e5f",
        prompt_label="mlx-community/Qwen2.5-7B-Instruct-4bit · max 1024 · t 0.2 · 3f9a1c2",
    )
    QueueConsumerFactory(worker_id="old-box:17", seen_at=now - timedelta(hours=3))
    GateLimit.objects.create(endpoint=url, limit=4, rates={"2": 41.0, "4": 80.5}, reason="climb")
