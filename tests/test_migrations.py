"""Migration 0010 (a reply's metadata on its revision): rows made at 0009 read the same after
it, through the revision, and the same again after migrating back. Migration 0011 (cached
tokens, the decode rate): stored rates are recomputed or, where implausible, cleared."""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from studyqueue.models import QueueConsumer, StudyQuestion, StudyQuestionJob
from studyqueue.monitoring import stats

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("studyqueue", "0009_question_changed")]
AFTER = [("studyqueue", "0010_reply_metadata_on_the_revision")]


def migrate(target: list[tuple[str, str]]) -> Any:
    """Migrate the test database to ``target``; the historical apps at that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    executor.loader.build_graph()
    return executor.loader.project_state(target).apps


@pytest.fixture
def at_0009():
    apps = migrate(BEFORE)
    yield apps
    migrate(executor_leaves())


def executor_leaves() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _make_rows(apps: Any) -> dict[str, int]:
    """A queue as 0009 holds it: a job that wrote revisions (one retried for quality), a job
    from before revisions existed (its reply's revision made by 0007), an explanation with
    no revision at all (raw SQL), a failed job, and consumers that recorded pauses."""
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    job_model = apps.get_model("studyqueue", "StudyQuestionJob")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    consumer_model = apps.get_model("studyqueue", "QueueConsumer")
    now = timezone.now()

    q1 = question_model.objects.create(text="Q1?")
    j1 = job_model.objects.create(
        study_question=q1, kind="explanation", status="completed", attempts=2, max_attempts=3,
        completed_at=now, llm_model="m1", llm_prompt_tokens=10, llm_completion_tokens=20,
        llm_ms=1500, llm_first_token_ms=100, llm_tokens_per_second=50.0, prompt_version="v1",
        quality_retried=True, max_tokens=2048,
    )  # fmt: skip
    revision_model.objects.create(  # the first reply, flagged and retried
        question=q1, job=j1, text="Cut", model="m1", prompt_version="v1", prompt_tokens=10,
        completion_tokens=1024, finish_reason="length", flags=["truncated"],
        created_at=now - timedelta(minutes=1),
    )  # fmt: skip
    r1 = revision_model.objects.create(
        question=q1, job=j1, text="Whole.", model="m1", prompt_version="v1", prompt_label="L",
        prompt_tokens=10, completion_tokens=20, first_token_ms=100, tokens_per_second=50.0,
        finish_reason="stop", flags=[], created_at=now,
    )  # fmt: skip
    question_model.objects.filter(pk=q1.pk).update(
        current_revision=r1, explanation="Whole.", explanation_model="m1",
        explanation_truncated=False, explained_at=now, explanation_prompt_version="v1",
        explanation_flags=[],
    )  # fmt: skip

    q2 = question_model.objects.create(text="Q2?")
    old = now - timedelta(minutes=30)
    j2 = job_model.objects.create(
        study_question=q2, kind="explanation", status="completed", attempts=1, max_attempts=3,
        completed_at=old, llm_model="m2", llm_prompt_tokens=30, llm_completion_tokens=40,
        llm_ms=900, llm_first_token_ms=200, llm_tokens_per_second=12.5,  # no version before 0006
    )  # fmt: skip
    r2 = revision_model.objects.create(  # as 0007 made it: from the question, no job
        question=q2, text="Old, cut", model="m2", finish_reason="length", flags=["truncated"],
        created_at=old,
    )  # fmt: skip
    question_model.objects.filter(pk=q2.pk).update(
        current_revision=r2, explanation="Old, cut", explanation_model="m2",
        explanation_truncated=True, explained_at=old, explanation_flags=["truncated"],
    )  # fmt: skip

    q3 = question_model.objects.create(
        text="Q3?", explanation="Raw.", explanation_model="m3", explanation_truncated=True,
        explained_at=now - timedelta(hours=2), explanation_prompt_version="v3",
        explanation_flags=["truncated", "too_short"],
    )  # fmt: skip
    q4 = question_model.objects.create(text="Q4?")
    j4 = job_model.objects.create(
        study_question=q4, kind="explanation", status="failed", attempts=3, max_attempts=3,
        completed_at=now, error_code="llm_timeout", llm_ms=None,
    )  # fmt: skip
    common = {"host": "h", "pid": 1, "started_at": now, "seen_at": now, "interval_seconds": 60}
    consumer_model.objects.create(worker_id="c1", paused_kinds="all,session_summary", **common)
    consumer_model.objects.create(worker_id="c2", paused_kinds="", **common)
    return {"j1": j1.pk, "j2": j2.pk, "j4": j4.pk, "q1": q1.pk, "q2": q2.pk, "q3": q3.pk}


def _read_0009(apps: Any, ids: dict[str, int]) -> dict[str, Any]:
    """What the pages read at 0009: the job's and the question's own columns."""
    job_model = apps.get_model("studyqueue", "StudyQuestionJob")
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    consumer_model = apps.get_model("studyqueue", "QueueConsumer")
    out: dict[str, Any] = {}
    for name in ("j1", "j2", "j4"):
        j = job_model.objects.get(pk=ids[name])
        out[name] = (
            j.llm_model, j.llm_prompt_tokens, j.llm_completion_tokens, j.llm_first_token_ms,
            j.llm_tokens_per_second, j.prompt_version, j.llm_ms, j.max_tokens,
        )  # fmt: skip
    for name in ("q1", "q2", "q3"):
        q = question_model.objects.get(pk=ids[name])
        out[name] = (
            q.explanation, q.explanation_model, q.explanation_truncated, q.explained_at,
            q.explanation_prompt_version, q.explanation_flags,
        )  # fmt: skip
    out["consumers"] = {
        c.worker_id: ", ".join(k or "all" for k in c.paused_kinds.split(",") if k)
        for c in consumer_model.objects.all()
    }
    return out


def _read_0010(ids: dict[str, int]) -> dict[str, Any]:
    """The same facts read today: the reply's through its revision."""
    out: dict[str, Any] = {}
    for name in ("j1", "j2", "j4"):
        j = StudyQuestionJob.objects.select_related("revision").get(pk=ids[name])
        r = j.revision
        out[name] = (
            r.model if r else "",
            r.prompt_tokens if r else None,
            r.completion_tokens if r else None,
            r.first_token_ms if r else None,
            r.tokens_per_second if r else None,
            r.prompt_version if r else "",
            j.llm_ms,
            j.max_tokens,
        )
    for name in ("q1", "q2", "q3"):
        q = StudyQuestion.objects.select_related("current_revision").get(pk=ids[name])
        r = q.current_revision
        assert r is not None, name
        out[name] = (
            q.explanation, r.model, r.truncated, r.created_at,
            q.explanation_prompt_version, q.explanation_flags,
        )  # fmt: skip
    out["consumers"] = {c.worker_id: c.paused_display for c in QueueConsumer.objects.all()}
    return out


def test_rows_made_at_0009_read_the_same_after_0010_and_back(at_0009):
    ids = _make_rows(at_0009)
    before = _read_0009(at_0009, ids)
    now = timezone.now()
    tokens_before = (10 + 30, 20 + 40)  # what the metrics summed over the jobs' own columns

    migrate(AFTER)
    migrate(executor_leaves())  # the current models read the latest schema
    # 0011 turns the stored rates into decode rates (tested on its own below).
    fix = importlib.import_module("studyqueue.migrations.0011_cached_tokens_decode_rate")
    for name in ("j1", "j2", "j4"):
        row = list(before[name])
        row[4] = fix.corrected_rate(row[2], row[4])
        before[name] = tuple(row)
    after = _read_0010(ids)
    assert after == before
    assert QueueConsumer.objects.get(worker_id="c1").paused_kinds == ["", "session_summary"]
    assert (stats.tokens(now).prompt, stats.tokens(now).completion) == tokens_before
    # The dashboard's hourly means read the jobs' old values through the revisions.
    expected: dict[Any, list[int]] = {}
    for job in StudyQuestionJob.objects.filter(status="completed"):
        hour = job.completed_at.replace(minute=0, second=0, microsecond=0)
        expected.setdefault(hour, []).append({ids["j1"]: 100, ids["j2"]: 200}[job.pk])
    means = {h.start: h.first_token_ms for h in stats.hourly(now) if h.completed}
    assert means == {hour: sum(v) / len(v) for hour, v in expected.items()}
    # The 0007 revision adopted the job that wrote its reply.
    job2 = StudyQuestionJob.objects.get(pk=ids["j2"])
    assert job2.revision is not None and job2.revision.job_id == job2.pk

    apps = migrate(BEFORE)
    assert _read_0009(apps, ids) == before


# --------------------------------------------------------------------------- 0011

AT_0011 = [("studyqueue", "0011_cached_tokens_decode_rate")]


def test_0011_recomputes_stored_rates_as_decode_rates_or_clears_them(at_0009):
    apps = migrate(AFTER)
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    # (completion tokens, rate stored by the old formula n / span) -> the decode rate
    cases = {
        (20, 50.0): 47.5,  # span 400 ms: 19 tokens after the first in 0.4 s
        (2, 40.0): 20.0,  # span 50 ms, the shortest kept: one token after the first
        (30, 6500.0): None,  # span 4.6 ms: the absurd rates of short replies
        (300, 18000.0): None,  # span 16.7 ms
        (1, 10.0): None,  # one token has no decode time
        (None, 12.0): None,  # no count to check it against
        (5, None): None,
        (5, float("inf")): None,
        (5, -3.0): None,
    }
    ids = {}
    for n, ((tokens, rate), _) in enumerate(cases.items()):
        question = question_model.objects.create(text=f"Q{n}?")
        ids[(tokens, rate)] = revision_model.objects.create(
            question=question, text="A", completion_tokens=tokens, tokens_per_second=rate
        ).pk

    apps = migrate(AT_0011)
    revisions = apps.get_model("studyqueue", "ExplanationRevision").objects
    for case, expected in cases.items():
        row = revisions.get(pk=ids[case])
        assert row.tokens_per_second == expected, case
        assert row.cached_tokens is None, case  # earlier servers' caches: unknown

    apps = migrate(AFTER)  # back: the corrected values stay
    revisions = apps.get_model("studyqueue", "ExplanationRevision").objects
    assert revisions.get(pk=ids[(20, 50.0)]).tokens_per_second == 47.5
