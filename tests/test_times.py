"""Exports write times with the offset of the configured TIME_ZONE: a 09:00 session in Seoul
is 09:00+09:00 in every file, not 00:00+00:00."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from studyqueue.explanations import revisions
from studyqueue.models import ExplanationRevision, StudyQuestion, StudySession
from tests.factories import ExplanationRevisionFactory

pytestmark = pytest.mark.django_db

NINE_IN_SEOUL = datetime(2026, 12, 1, 0, 0, 5, tzinfo=UTC)


def export(*args: str) -> list[dict]:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_exports_carry_the_offset_of_the_time_zone(settings):
    settings.TIME_ZONE = "Asia/Seoul"
    question = StudyQuestion.objects.create(text="Q?")
    revision = ExplanationRevisionFactory(question=question, text="Because.")
    ExplanationRevision.objects.filter(pk=revision.pk).update(created_at=NINE_IN_SEOUL)
    assert revisions.make_current(revision)
    StudySession.objects.create(
        external_id="s-1",
        learner="kim-07",
        started_at=NINE_IN_SEOUL,
        ended_at=NINE_IN_SEOUL,
        right=0,
        total=0,
        fingerprint="f",
    )
    (explained,) = export("exportexplanations")
    assert explained["explained_at"] == "2026-12-01T09:00:05+09:00"
    (summary,) = export("exportsummaries")
    assert (summary["started_at"], summary["ended_at"]) == ("2026-12-01T09:00:05+09:00",) * 2
    settings.TIME_ZONE = "UTC"
    assert export("exportsummaries")[0]["started_at"] == "2026-12-01T00:00:05+00:00"
