"""The key audit: before a question's first explanation (and after its content changes), the
model is asked for the answer alone, never shown the key, and its samples are judged against
the key (``judge``); a dispute waits for a reviewer (docs/howto/checks.md, "The key audit")."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from studyqueue.conf import conf
from studyqueue.explanations import answers, revisions
from studyqueue.models import (
    JobKind,
    KeyAudit,
    KeyCheck,
    StudyQuestion,
    StudyQuestionJob,
    awaiting_key_check,
    validate_choices,
)
from studyqueue.queue import notify
from studyqueue.queue.enqueue import enqueue_many
from studyqueue.queue.operations import batches
from studyqueue.queue.store import Fenced
from studyqueue.queue.transitions import Outcome, Usage

logger = logging.getLogger("studyqueue.key_audit")

# A reply is one short line ("Answer: 2"): room for it, never for an explanation.
MAX_TOKENS = 16

# Fixed text first, in the system message (the server's prompt cache); the question last.
SYSTEM = (
    "You answer multiple-choice questions. Reply with one line only, in the form "
    '"Answer: N", where N is the number of the correct choice. Do not explain.'
)
#: The gate's name for the audit's prompt prefix (its warm-first groups calls by it).
PREFIX = hashlib.sha256(SYSTEM.encode()).hexdigest()[:12]


def check_messages(system: str, question: StudyQuestion, *parts: str) -> list[dict[str, str]]:
    """A check's chat messages: its fixed ``system`` text, then the question, its numbered
    choices and the check's own ``parts`` (the audit, the verifier and the step check)."""
    numbered = "\n".join(f"{n}. {choice}" for n, choice in enumerate(question.choices, 1))
    user = "\n\n".join((f"Question:\n{question.text.strip()}", f"Choices:\n{numbered}", *parts))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_messages(question: StudyQuestion) -> list[dict[str, str]]:
    """The audit's chat messages, never the key (invalid choices: ``ValidationError``)."""
    validate_choices(question.choices)
    return check_messages(SYSTEM, question)


def content_changed(
    question_ids: Sequence[int], key_changed: Collection[int], *, using: str
) -> None:
    """The questions' content changed: their audits are cleared, but a dispute awaiting a
    reviewer whose key did not change keeps holding, marked as of other content."""
    questions = StudyQuestion.objects.using(using).filter(pk__in=list(question_ids))
    disputed = questions.filter(awaiting_key_check()).exclude(pk__in=list(key_changed))
    held = set(disputed.values_list("pk", flat=True))
    questions.filter(pk__in=held).update(key_audit_hash="")
    questions.exclude(pk__in=held).exclude(key_audit="").update(
        key_audit="", key_audit_answer=None, key_audit_samples=[], key_audit_hash=""
    )


def queue_audits(ids: Iterable[int]) -> int:
    """Queue an audit for each of the ``ids``' checkable questions whose content was never
    audited (none while ``KEY_AUDIT`` is off); how many."""
    if not conf.KEY_AUDIT:
        return 0
    checkable = StudyQuestion.objects.exclude(text="").exclude(choices=[]).exclude(answer="")
    unaudited = checkable.filter(Q(key_audit="") | Q(key_audit_hash=""))
    found: list[int] = []
    for chunk in batches(sorted(set(ids)), unaudited.db):
        found += unaudited.filter(pk__in=chunk).values_list("pk", flat=True)
    return enqueue_many(sorted(found), JobKind.KEY_AUDIT) if found else 0


@dataclass(frozen=True)
class Verdict:
    """What the samples say of the key: ``key_audit`` and, when disputed, the choice."""

    key_audit: KeyAudit
    answer: int | None = None


def judge(samples: Sequence[int | None], key: int | None) -> Verdict:
    """``agrees`` for a majority naming the key, ``disputed`` for one other choice, else unsure
    (no samples: unsure)."""
    if key is not None and sum(1 for answer in samples if answer == key) * 2 > len(samples):
        return Verdict(KeyAudit.AGREES)
    if len(set(samples)) == 1 and samples[0] not in (None, key):
        return Verdict(KeyAudit.DISPUTED, samples[0])
    return Verdict(KeyAudit.UNSURE)


def settled(samples: Sequence[int | None], key: int | None, planned: int) -> bool:
    """Whether ``judge``'s verdict is decided whatever the rest of the ``planned`` samples say."""
    named_key = sum(1 for answer in samples if answer == key) if key is not None else 0
    if named_key * 2 > planned:
        return True
    left = planned - len(samples)
    could_agree = key is not None and (named_key + left) * 2 > planned
    could_dispute = len(set(samples)) <= 1 and not (set(samples) & {None, key})
    return not could_agree and not could_dispute


@dataclass(frozen=True)
class Sample:
    """One reply: its text (cut) and the choice it names (None: unread)."""

    reply: str
    answer: int | None


@dataclass(frozen=True)
class Audited(Fenced):
    """The audit handler's result: the question as its prompt saw it, and the samples."""

    question: StudyQuestion
    samples: list[Sample]
    llm_ms: int | None = None
    usage: Usage | None = None  # the samples' tokens, summed

    def writes(self, job: StudyQuestionJob) -> Outcome:
        """Job, attempt and audit in one transaction (``revisions.complete_if_unchanged``)."""
        now, outcome = revisions.complete_if_unchanged(
            job,
            self.question,
            fields=("text", "choices", "answer", "key_audit", "key_check"),
            during="while its key was audited",
            dropped="its samples were dropped",
            llm_ms=self.llm_ms,
            usage=self.usage,
        )
        if now is None:
            return outcome
        key = answers.key_choice(now.answer, now.choices)
        verdict = judge([sample.answer for sample in self.samples], key)
        values: dict[str, object] = {
            "key_audit": verdict.key_audit,
            "key_audit_answer": verdict.answer,
            "key_audit_samples": [
                {"answer": sample.answer, "reply": sample.reply[:200]} for sample in self.samples
            ],
            "key_audit_hash": now.content_hash(),
        }
        if verdict.key_audit == KeyAudit.DISPUTED:
            # A new dispute is a new question for a person: an older decision is not it.
            values.update(key_check="", key_check_by="", key_check_at=None)
        StudyQuestion.objects.filter(pk=now.pk).update(**values)
        # The question's explanation job may wait for this audit: it can run now.
        notify.send(notify.wake(), using=StudyQuestion.objects.all().db)
        logger.info(
            "study_key_audit question=%s key_audit=%s answer=%s samples=%s",
            self.question.pk,
            verdict.key_audit,
            verdict.answer or "-",
            ",".join(str(sample.answer or "?") for sample in self.samples),
        )
        return outcome


def key_checks() -> QuerySet[StudyQuestion]:
    """Disputed keys no reviewer has kept or changed yet, in id order."""
    return StudyQuestion.objects.filter(awaiting_key_check()).order_by("pk")


def decide_key(
    question: StudyQuestion, *, take_model_choice: bool, by: str, seen: str | None = None
) -> bool:
    """A reviewer's decision on a disputed key: keep it, or take the model's choice. False when
    it is no longer disputed, or its content is not ``seen`` (the hash the page showed)."""
    questions = StudyQuestion.objects.all()
    db = questions.db
    with transaction.atomic(using=db):
        now = questions.select_for_update().filter(pk=question.pk).first()
        if now is None or now.key_audit != KeyAudit.DISPUTED or now.key_check:
            return False
        if seen is not None and seen != now.content_hash():
            return False
        answer = now.key_audit_answer
        if take_model_choice:
            if answer is None or not 1 <= answer <= len(now.choices):
                return False
            now.answer = now.choices[answer - 1]
            now.save(using=db, update_fields=["answer", "updated_at"])
            # Approvals are void; the same samples are judged again (they never saw the key).
            revisions.content_changed([now.pk], using=db)
            samples = [s.get("answer") for s in now.key_audit_samples if isinstance(s, dict)]
            verdict = judge(samples, answers.key_choice(now.answer, now.choices))
            decision = KeyCheck.CHANGED
            values: dict[str, object] = {
                "key_audit": verdict.key_audit,
                "key_audit_answer": verdict.answer if verdict.answer is not None else answer,
                "key_audit_hash": now.content_hash(),
            }
        else:
            decision, values = KeyCheck.KEPT, {}
        StudyQuestion.objects.filter(pk=now.pk).update(
            key_check=decision, key_check_by=by, key_check_at=timezone.now(), **values
        )
        # A held explanation may run now.
        notify.send(notify.wake(), using=db)
    logger.info("study_key_checked question=%s decision=%s by=%s", question.pk, decision, by)
    return True


@dataclass(frozen=True)
class Rates:
    """The audit in numbers: audited questions, disputes, and what reviewers decided."""

    audited: int
    disputed: int
    upheld: int  # disputes whose key a reviewer changed to the model's choice
    kept: int  # disputes whose key a reviewer kept

    @property
    def dispute_percent(self) -> str:
        """The dispute rate as a page shows it: ``12.5``."""
        return f"{self.disputed / self.audited * 100 if self.audited else 0:.1f}"


def rates() -> Rates:
    """The dispute rate and the reviewers' decisions (a changed key still counts disputed)."""
    audited = StudyQuestion.objects.exclude(key_audit="")
    upheld = audited.filter(key_check=KeyCheck.CHANGED).count()
    kept = audited.filter(key_check=KeyCheck.KEPT).count()
    disputed = audited.filter(key_audit=KeyAudit.DISPUTED).exclude(key_check=KeyCheck.CHANGED)
    return Rates(audited.count(), disputed.count() + upheld, upheld, kept)
