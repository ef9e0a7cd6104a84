"""What a column can hold (``studyqueue.queue.columns``): widths read from the model fields, text
every database stores, and a reply that holds what no column can store."""

from __future__ import annotations

import pytest

from studyqueue.models import (
    ExplanationRevision,
    QueueConsumer,
    QueuePause,
    StudyQuestion,
    StudyQuestionJob,
    fit,
    storable,
    unstorable,
    width,
)
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory


@pytest.mark.parametrize(
    "model,field",
    [
        (StudyQuestionJob, "worker_id"),
        (ExplanationRevision, "model"),
        (QueueConsumer, "host"),
        (QueueConsumer, "llm_url"),
        (QueuePause, "reason"),
        (ExplanationRevision, "finish_reason"),
    ],
)
def test_fit_cuts_to_the_fields_own_width(model, field):
    limit = model._meta.get_field(field).max_length
    assert width(model, field) == limit
    assert fit(model, field, "x" * (limit + 5)) == "x" * limit
    assert fit(model, field, "short") == "short"


def test_a_field_without_a_width_is_an_error():
    with pytest.raises(TypeError, match="has no max_length"):
        width(StudyQuestion, "text")


@pytest.mark.parametrize(
    "text,stored",
    [
        ("plain", "plain"),
        ("a\x00b", "ab"),
        ("lone \ud800 high", "lone \ufffd high"),
        ("lone \udc00 low", "lone \ufffd low"),
        ("apart \ud83d" + "\ude00 joined", "apart \U0001f600 joined"),
        ("\x00\ud800", "\ufffd"),
    ],
)
def test_storable_text(text, stored):
    assert storable(text) == stored
    assert not unstorable(stored)


@pytest.mark.parametrize("text", ["a\x00", "\ud800", "x\udfff"])
def test_unstorable_names_what_no_column_holds(text):
    assert unstorable(text)


@pytest.mark.django_db(transaction=True)
def test_a_reply_with_a_lone_surrogate_is_stored_not_failed(llm_server, make_consumer):
    """JSON may escape half a surrogate pair (``\\ud800``); no database encodes it. The
    reply is stored with U+FFFD in its place (before: the job failed as ``internal``)."""
    llm_server.answer = "Because 2 + 2 \ud800 equals 4 \U0001f600."
    job = enqueue(StudyQuestionFactory()).job
    assert make_consumer().run_cycle().outcomes == {"completed": 1}
    job.refresh_from_db()
    assert (job.status, job.error_code) == ("completed", "")
    question = StudyQuestion.objects.get()
    assert question.explanation == "Because 2 + 2 \ufffd equals 4 \U0001f600."
