"""What "outdated" is measured against: the live consumers' prompt versions, and what is
said when they disagree, when the settings here differ, and when none is live."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from studyqueue.explanations import outdated
from studyqueue.explanations.prompts import current_version
from studyqueue.models import StudyQuestion, StudyQuestionJob
from studyqueue.queue.enqueue import enqueue
from tests.factories import QueueConsumerFactory, StudyQuestionFactory

pytestmark = pytest.mark.django_db


def test_with_no_live_consumer_the_local_version_counts_and_it_says_so():
    # Silent, stopped and version-less consumers do not count.
    QueueConsumerFactory(prompt_version="aaaaaaaaaaaa", seen_at=timezone.now() - timedelta(hours=1))
    QueueConsumerFactory(prompt_version="bbbbbbbbbbbb", stopped_at=timezone.now())
    QueueConsumerFactory(prompt_version="")
    basis = outdated.basis()
    local = current_version()
    assert (basis.from_live, basis.versions, basis.warnings) == (False, [local.hash], [])
    assert basis.summary == (
        "No live consumer reports its prompt version: outdated against the prompt version "
        f"of these settings, {local.label}."
    )


def test_the_live_consumers_version_counts_and_a_different_one_here_is_a_warning():
    QueueConsumerFactory.create_batch(2, prompt_version="aaaaaaaaaaaa", prompt_label="m · aaaaaaa")
    basis = outdated.basis()
    assert (basis.from_live, basis.versions, basis.disagree) == (True, ["aaaaaaaaaaaa"], False)
    assert basis.summary == "Outdated against prompt version m · aaaaaaa, used by 2 live consumers."
    (warning,) = basis.warnings
    assert warning.startswith(
        f"The prompt version of these settings, {current_version().label}, differs from the "
        "live consumers'"
    )


def test_the_same_version_here_and_there_needs_no_warning():
    local = current_version()
    QueueConsumerFactory(prompt_version=local.hash, prompt_label=local.label)
    basis = outdated.basis()
    assert (
        basis.summary == f"Outdated against prompt version {local.label}, used by 1 live consumer."
    )
    assert basis.warnings == []


def test_consumers_that_disagree_all_count_most_used_first_and_it_says_so():
    local = current_version()
    QueueConsumerFactory(prompt_version="bbbbbbbbbbbb", prompt_label="b")
    QueueConsumerFactory.create_batch(2, prompt_version=local.hash, prompt_label=local.label)
    basis = outdated.basis()
    assert basis.versions == [local.hash, "bbbbbbbbbbbb"]
    assert basis.summary == (
        "Outdated against the prompt versions of the live consumers: "
        f"{local.label} (2 consumers); b (1 consumer)."
    )
    (warning,) = basis.warnings  # the local version is one of theirs: no second warning
    assert warning.startswith("The live consumers disagree on the prompt version")
    assert basis.short == f"{local.hash[:7]}, bbbbbbb"

    StudyQuestionFactory(explanation="x", explanation_prompt_version=local.hash)
    StudyQuestionFactory(explanation="y", explanation_prompt_version="bbbbbbbbbbbb")
    old = StudyQuestionFactory(explanation="z", explanation_prompt_version="cccccccccccc")
    assert list(StudyQuestion.objects.outdated(basis.versions)) == [old]
    assert StudyQuestion.objects.current(basis.versions).count() == 2


@pytest.mark.django_db(transaction=True)
def test_enqueue_outdated_follows_the_consumers_model_not_the_shells(
    llm_server, make_consumer, settings
):
    """The issue's trap: the consumers run with a model this shell does not set. Their
    explanations are current; enqueue --outdated queues nothing and warns on stderr."""
    shell = settings.STUDYQUEUE
    settings.STUDYQUEUE = {**shell, "LLM_MODEL": "consumers-model"}
    consumer = make_consumer(worker_id="gpu:1")
    enqueue(question := StudyQuestionFactory())
    consumer.run_cycle()
    question.refresh_from_db()
    assert question.explanation_prompt_version == current_version().hash
    settings.STUDYQUEUE = shell  # this shell: no model set

    out, err = StringIO(), StringIO()
    call_command("enqueue", "--outdated", stdout=out, stderr=err)
    assert out.getvalue().strip() == "Created 0 explanation job(s); 0 already queued."
    summary, warning = err.getvalue().strip().splitlines()
    assert summary.startswith("Outdated against prompt version consumers-model · ")
    assert summary.endswith(", used by 1 live consumer.")
    assert warning.startswith("Warning: The prompt version of these settings, server default")

    consumer.close()  # stopped: no live consumer, this shell's version counts and it says so
    err = StringIO()
    call_command("enqueue", "--outdated", stdout=out, stderr=err)
    assert err.getvalue().startswith("Warning: No live consumer reports its prompt version")
    assert StudyQuestionJob.objects.filter(study_question=question, status="pending").exists()
