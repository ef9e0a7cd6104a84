"""The blind verifier: after an explanation is kept, the model reads its reasoning with every
statement of the answer hidden (``hiding``), never the key, and names the choice it supports;
``judge`` flags the revision against the key (docs/howto/checks.md, "The blind verifier")."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import ClassVar

from django.utils import timezone

from studyqueue.explanations import answers, hiding, key_audit, revisions
from studyqueue.models import (
    ExplanationRevision,
    StudyQuestion,
    StudyQuestionJob,
    revision_to_verify,
    validate_choices,
)
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.store import Fenced
from studyqueue.queue.transitions import Outcome, Usage

logger = logging.getLogger("studyqueue.verifier")

MAX_TOKENS = key_audit.MAX_TOKENS  # one short line, as the key audit's reply

# Fixed text first, in the system message (the server's prompt cache); the question last.
SYSTEM = (
    "You check explanations of multiple-choice questions. Read the explanation and decide "
    "which choice its reasoning supports. Reply with one line only, in the form "
    '"Answer: N", where N is the number of that choice, or "Answer: none" if it supports '
    "no single choice. Do not explain."
)
#: The gate's name for the verifier's prompt prefix (its warm-first groups calls by it).
PREFIX = hashlib.sha256(SYSTEM.encode()).hexdigest()[:12]


def blind(question: StudyQuestion, explanation: str) -> hiding.Blind:
    """``hiding.blind`` for the question (invalid choices: ``ValidationError``)."""
    validate_choices(question.choices)
    return hiding.blind(explanation, question.choices)


def build_messages(question: StudyQuestion, reasoning: str) -> list[dict[str, str]]:
    """The verifier's chat messages: the question, its choices and ``reasoning``; no key."""
    return key_audit.check_messages(SYSTEM, question, f"Explanation:\n{reasoning}")


def judge(answer: int | None, key: int | None) -> list[str]:
    """The verifier's flags: ``verifier_disagrees`` for another choice than the key,
    ``verifier_unsure`` for none; no flag for the key, or a key that names no choice."""
    if key is None:
        return []
    if answer is None:
        return [revisions.VERIFIER_UNSURE]
    return [] if answer == key else [revisions.VERIFIER_DISAGREES]


@dataclass(frozen=True)
class Check(Fenced):
    """A check's verdict on a revision (``Verified``, ``step_check.StepChecked``): ``write``
    keeps it; each says what it records (``record``) and under which logger."""

    question: StudyQuestion
    revision: ExplanationRevision
    reply: str
    usage: Usage | None = field(kw_only=True)  # the check's own call, never the revision's
    llm_ms: int | None = field(default=None, kw_only=True)

    step_check: ClassVar[bool] = False  # which of the revision's verdicts it gives
    log: ClassVar[logging.Logger] = logger

    def record(self, now: StudyQuestion) -> str:
        """Record the verdict on the revision (``revisions.record_verdict``); the log line."""
        raise NotImplementedError

    def writes(self, job: StudyQuestionJob) -> Outcome:
        """Job, attempt and verdict in one transaction (``revisions.complete_if_unchanged``)."""
        now, outcome = revisions.complete_if_unchanged(
            job,
            self.question,
            fields=("text", "choices", "answer", "current_revision", "explanation_flags"),
            during=f"while its explanation was checked ({job.kind})",
            dropped="its reply was dropped",
            revision=self.revision,
            llm_ms=self.llm_ms,
            usage=self.usage,
        )
        if now is None:
            return outcome
        line = self.record(now)
        if revision_to_verify(now, step_check=self.step_check) is not None:
            enqueue(now.pk, job.kind)  # a newer one came during this check
        self.log.info("%s", line)
        return outcome


@dataclass(frozen=True)
class Verified(Check):
    """The verification handler's result (``answer``: the choice the reply names, or None)."""

    answer: int | None

    @classmethod
    def not_asked(
        cls, question: StudyQuestion, revision: ExplanationRevision, problem: str
    ) -> Verified:
        """The verdict without a call: no choice named (``verifier_unsure``), and why."""
        return cls(question, revision, f"not asked: {problem}", None, usage=Usage())

    def record(self, now: StudyQuestion) -> str:
        key = answers.key_choice(now.answer, now.choices)
        verdict = judge(self.answer, key)
        revision = revisions.record_verdict(
            self.revision.pk,
            now,
            flags=verdict,
            verifier_answer=self.answer,
            verifier_reply=self.reply,
            verified_at=timezone.now(),
        )
        return (
            f"study_verified question={now.pk} revision={revision.pk} "
            f"answer={self.answer or '-'} key={key or '-'} flags={','.join(verdict) or '-'}"
        )
