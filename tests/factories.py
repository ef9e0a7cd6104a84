"""factory-boy factories for the studyqueue models."""

import factory
from django.utils import timezone

from studyqueue.models import (
    ExplanationRevision,
    JobKind,
    JobStatus,
    QueueConsumer,
    StudyQuestion,
    StudyQuestionJob,
)


class StudyQuestionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = StudyQuestion

    text = factory.Sequence(lambda n: f"What is {n} + {n}?")
    choices = factory.LazyAttribute(lambda q: [])
    answer = ""


class StudyQuestionJobFactory(factory.django.DjangoModelFactory):
    """A job row in any state; tests build states directly to exercise transitions."""

    class Meta:
        model = StudyQuestionJob

    study_question = factory.SubFactory(StudyQuestionFactory)
    kind = JobKind.EXPLANATION
    status = JobStatus.PENDING


class ExplanationRevisionFactory(factory.django.DjangoModelFactory):
    """A reply kept as a revision (not made current: ``revisions.make_current`` does that)."""

    class Meta:
        model = ExplanationRevision

    question = factory.SubFactory(StudyQuestionFactory)
    text = "Because it is."
    model = "m"
    finish_reason = "stop"


class QueueConsumerFactory(factory.django.DjangoModelFactory):
    """A consumer's record of itself, live (it reported just now) unless told otherwise."""

    class Meta:
        model = QueueConsumer

    worker_id = factory.Sequence(lambda n: f"box:{n}")
    host = "box"
    pid = factory.Sequence(lambda n: n + 1)
    started_at = factory.LazyFunction(timezone.now)
    seen_at = factory.LazyFunction(timezone.now)
    interval_seconds = 60
    llm_url = "http://127.0.0.1:8080/v1"
