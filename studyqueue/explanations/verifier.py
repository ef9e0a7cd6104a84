"""The blind verifier: after an explanation is kept, the model reads it without its answer
line and says which choice it supports.

Our prompt hands the explanation's writer the key, so the answer line almost always names it;
what the last line cannot tell is whether the reasoning above argues for it. The verifier's
prompt holds the question, its numbered choices and the explanation's reasoning: every
sentence or clause that states the answer, names a choice as it or says which to pick is
hidden (``hiding.hide_statements``): never the key, never the stated answer. It asks for a few
tokens (``MAX_TOKENS``) at temperature 0. The reply is read by the answer reader
(``answers.choice_named``); a reply it cannot read names no choice, never the key.

When the statements cannot be hidden reliably (nothing of the reasoning is left without them,
or an answer is still stated in what is: ``hiding.blind``), the model is not asked: the
revision gets ``verifier_unsure`` at once, and ``verifier_reply`` says why (``NOT_ASKED``).

The revision gets ``verifier_answer`` and, against the question's key, a flag (``judge``):

- ``verifier_disagrees``: it names another choice than the key;
- ``verifier_unsure``: it names none (or several, or something that is no choice);
- no flag when it names the key.

Which revision a verification job checks (``models.revision_to_verify``): the question's
newest generated revision not yet verified that is its current explanation (and not
outdated) or a candidate waiting for a reviewer. ``Verified`` writes the result fenced by the
claim and the question's content, in one transaction, and queues the next check if another
revision waits.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from django.db import transaction

from studyqueue.explanations import answers, hiding, quality, revisions
from studyqueue.models import (
    ExplanationRevision,
    JobKind,
    StudyQuestion,
    StudyQuestionJob,
    revision_to_verify,
    validate_choices,
)
from studyqueue.queue.attempts import Usage
from studyqueue.queue.enqueue import enqueue
from studyqueue.queue.transitions import Outcome

logger = logging.getLogger("studyqueue.verifier")

# A reply is one short line ("Answer: 2"): room for it, never for an explanation.
MAX_TOKENS = 16

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
    """What the verifier may read of ``explanation`` and why it must not be asked ("" when
    it may); the question's choices must be valid (``ValidationError``)."""
    validate_choices(question.choices)
    return hiding.blind(explanation, question.choices)


def build_messages(question: StudyQuestion, reasoning: str) -> list[dict[str, str]]:
    """The verifier's chat messages: the question, its numbered choices and the explanation's
    ``reasoning`` (``blind``'s text); never the key."""
    numbered = "\n".join(f"{n}. {choice}" for n, choice in enumerate(question.choices, 1))
    user = (
        f"Question:\n{question.text.strip()}\n\nChoices:\n{numbered}\n\nExplanation:\n{reasoning}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


#: How ``verifier_reply`` starts when the model was not asked (``blind`` found a problem).
NOT_ASKED = "not asked: "


def judge(answer: int | None, key: int | None) -> list[str]:
    """The verifier's flags: none when it names the key; ``verifier_disagrees`` when it names
    another choice; ``verifier_unsure`` when it names none. A key that names no choice cannot
    be disagreed with: no flag."""
    if key is None:
        return []
    if answer is None:
        return [quality.VERIFIER_UNSURE]
    return [] if answer == key else [quality.VERIFIER_DISAGREES]


@dataclass(frozen=True)
class Verified:
    """The verification handler's result: the question as its prompt saw it, the revision
    it checked, the reply and the choice it names (None: none read)."""

    question: StudyQuestion
    revision: ExplanationRevision
    reply: str
    answer: int | None
    usage: Usage | None  # the check's own call: never the checked revision's tokens
    llm_ms: int | None = None

    @classmethod
    def not_asked(
        cls, question: StudyQuestion, revision: ExplanationRevision, problem: str
    ) -> Verified:
        """The verdict without a call: no choice named (``verifier_unsure``), and why."""
        return cls(question, revision, f"{NOT_ASKED}{problem}", None, usage=Usage())

    def write(self, job: StudyQuestionJob) -> Outcome:
        """Job, attempt and the revision's verdict in one transaction, fenced by the claim
        and the question's content (a check of an explanation whose question changed during
        the call is dropped, and the job runs again on what is there then)."""
        db = StudyQuestion.objects.all().db
        with transaction.atomic(using=db):
            now, outcome = revisions.complete_if_unchanged(
                job,
                self.question,
                fields=("text", "choices", "answer", "current_revision", "explanation_flags"),
                during="while its explanation was verified",
                dropped="its reply was dropped",
                revision=self.revision,
                llm_ms=self.llm_ms,
                usage=self.usage,
            )
            if now is None:
                return outcome
            key = answers.key_choice(now.answer, now.choices)
            verdict = judge(self.answer, key)
            revision = revisions.record_verdict(
                self.revision.pk, now, answer=self.answer, reply=self.reply, flags=verdict
            )
            if revision_to_verify(now) is not None:  # a newer one came during this check
                enqueue(now.pk, JobKind.VERIFICATION)
        logger.info(
            "study_verified question=%s revision=%s answer=%s key=%s flags=%s",
            now.pk,
            revision.pk,
            self.answer or "-",
            key or "-",
            ",".join(verdict) or "-",
        )
        return outcome
