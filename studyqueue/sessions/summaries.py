"""A study session's summary: what it needs first (the explanations of the questions its
learner missed), its prompt, the checks of what it states, and its write; the only writer of
summaries and of a session's current one."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.dispatch import Signal

from studyqueue.conf import conf
from studyqueue.explanations import next_step
from studyqueue.explanations.prompts import PromptVersion, render, template_source, version_of
from studyqueue.models import (
    QUESTION_CHANGED_FLAG,
    JobKind,
    JobStatus,
    KeyAudit,
    SessionAnswer,
    SessionSummary,
    StudyQuestionJob,
    StudySession,
    fit,
)
from studyqueue.queue import transitions as queue
from studyqueue.queue.attempts import Usage
from studyqueue.queue.enqueue import enqueue_for_session
from studyqueue.services.llm import LLMReply

logger = logging.getLogger("studyqueue.sessions")

# Sent after the commit that made a summary current: ``sender`` is ``StudySession``,
# ``session`` the session, ``summary`` the summary.
session_summarized = Signal()

SCORE_MISMATCH = "score_mismatch"  # the score it states is not the session's
NO_SCORE_STATED = "no_score_stated"  # it states no score that can be read
WRONG_QUESTION = "wrong_question"  # it says a question was missed that was answered right
MISSED_NOT_MENTIONED = "missed_not_mentioned"  # a missed question it never names
FLAGS = (SCORE_MISMATCH, NO_SCORE_STATED, WRONG_QUESTION, MISSED_NOT_MENTIONED)

SYSTEM_TEMPLATE = "studyqueue/summary_system.txt"
EXPLANATION_CHARS = 400  # of each missed question's explanation, in the prompt


def explained(answer: SessionAnswer) -> bool:
    """The answer's question has an explanation written for its present content."""
    question = answer.question
    return question is None or (
        bool(question.explanation.strip())
        and QUESTION_CHANGED_FLAG not in (question.explanation_flags or [])
    )


def under_review(answer: SessionAnswer) -> bool:
    """Its key is disputed by the key audit and no reviewer has decided: not taught."""
    question = answer.question
    return (
        question is not None and question.key_audit == KeyAudit.DISPUTED and not question.key_check
    )


def outdated(answers: Iterable[SessionAnswer]) -> bool:
    """A question was deleted or re-keyed since the session: its summary may mislead."""
    return any(a.question is None or a.question.answer != a.key for a in answers)


def answers_of(session: StudySession | int) -> list[SessionAnswer]:
    """A session's answers with their questions, in order."""
    return list(SessionAnswer.objects.filter(session=session).select_related("question"))


def needed(answers: Iterable[SessionAnswer]) -> list[int]:
    """The questions whose explanation a summary waits for: missed, not explained, not held."""
    return [
        a.question_id
        for a in answers
        if a.question_id and not a.correct and not explained(a) and not under_review(a)
    ]


def queue_summaries(sessions: Iterable[StudySession | int]) -> int:
    """What each session needs next: the explanations its summary draws on, then the summary
    job (it waits for them); how many summary jobs were created."""
    created = 0
    for session in sessions:
        answers = answers_of(session)
        with transaction.atomic(using=StudyQuestionJob.objects.all().db):
            next_step.queue_jobs(needed(answers))
            pk = session if isinstance(session, int) else session.pk
            created += enqueue_for_session(pk, JobKind.SESSION_SUMMARY).created
    return created


def version() -> PromptVersion:
    """The summary prompt's version: its templates and the model settings."""
    return version_of(SYSTEM_TEMPLATE, template_source(conf.SUMMARY_PROMPT_TEMPLATE))


def _language(answers: list[SessionAnswer]) -> str:
    text = " ".join(a.question_text for a in answers)
    if re.search("[\uac00-\ud7a3]", text) or not re.search("[A-Za-z]", text):
        return "Korean (한국어)"
    return "the language of the questions"


def messages(session: StudySession, answers: list[SessionAnswer]) -> list[dict[str, str]]:
    """The chat messages: fixed instructions first (the server's prompt cache), then the
    session: each answer with its question, the choice, the key and the explanation."""
    rows = []
    for a in answers:
        held = under_review(a)
        explanation = "" if held or a.question is None else a.question.explanation
        chosen = a.chosen
        if a.choices and a.chosen.isdigit() and 0 < int(a.chosen) <= len(a.choices):
            chosen = f"{a.chosen}. {a.choices[int(a.chosen) - 1]}"
        rows.append(
            {
                "number": a.position,
                "question": a.question_text,
                "choices": a.choices,
                "chosen": chosen,
                "key": a.key,
                "correct": a.correct,
                "under_review": held,
                "explanation": explanation[:EXPLANATION_CHARS].strip(),
            }
        )
    context: dict[str, Any] = {
        "session": session,
        "answers": rows,
        "right": session.right,
        "total": session.total,
        "language": _language(answers),
    }
    return [
        {"role": "system", "content": render(SYSTEM_TEMPLATE, context)},
        {"role": "user", "content": render(conf.SUMMARY_PROMPT_TEMPLATE, context)},
    ]


# What a summary states of the score: "10문제 중 7문제", "7/10", "7 out of 10", "70%".
_OF_TOTAL = re.compile(
    r"(\d{1,3})\s*(?:문제|문항|개)\s*중(?:에서)?\s*(\d{1,3})\s*(?:문제|문항|개)?"
)
_RIGHT_OF = re.compile(
    r"(?<![\d/])(?<!\d[.:-])(\d{1,3})\s*(?:/|out\s+of|of)\s*(\d{1,3})(?![\d/]|[.:-]\d)",
    re.IGNORECASE,
)
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)\s*(?:%|퍼센트|percent)", re.IGNORECASE)
# A question by its number: "문제 3", "3번 문제", "3번", "Q3", "question 3", "#3".
_NUMBERED = re.compile(
    r"(?:문제|문항|question|Q|#)\s*(\d{1,3})(?!\d)|(?<!\d)(\d{1,3})\s*번", re.IGNORECASE
)
_MISSED_WORDS = re.compile(r"틀|오답|놓친|missed|wrong|incorrect", re.IGNORECASE)
# A clause: a sentence, or a part of one after "but" ("1번은 맞혔지만 3번은 틀렸습니다").
_CLAUSES = re.compile(r"(?<=[.!?。])\s+|\n+|;\s*|지만|반면|\bbut\s|\bwhereas\s", re.IGNORECASE)


@dataclass(frozen=True)
class Checked:
    """What a summary states, as read (unread figures absent), and its flags."""

    stated: dict[str, float]
    flags: list[str]


def _score(text: str) -> dict[str, float]:
    """The score it states; a figure stated two different ways is unread, never agreed."""
    fractions = {(int(m[2]), int(m[1])) for m in _OF_TOTAL.finditer(text)}
    fractions |= {(int(m[1]), int(m[2])) for m in _RIGHT_OF.finditer(text) if int(m[2]) > 0}
    percents = {float(m[1]) for m in _PERCENT.finditer(text)}
    stated: dict[str, float] = {}
    if len(fractions) == 1:
        ((right, total),) = fractions
        stated.update(right=right, total=total)
    if len(percents) == 1:
        stated["percent"] = percents.pop()
    return stated


def check(text: str, answers: list[SessionAnswer]) -> Checked:
    """The score and the missed questions a summary states, against the session (no call)."""
    right, total = sum(a.correct for a in answers), len(answers)
    stated = _score(text)
    flags = []
    if not stated:
        flags.append(NO_SCORE_STATED)
    elif ("right" in stated and (stated["right"], stated["total"]) != (right, total)) or (
        "percent" in stated and abs(stated["percent"] - 100 * right / total) > 1
    ):
        flags.append(SCORE_MISMATCH)
    positions = {a.position: a for a in answers}
    named: set[int] = set()
    said_missed: set[int] = set()
    for clause in _CLAUSES.split(text):
        numbers = {int(m[1] or m[2]) for m in _NUMBERED.finditer(clause)} & set(positions)
        named |= numbers
        if _MISSED_WORDS.search(clause):
            said_missed |= numbers
    if any(positions[n].correct for n in said_missed):
        flags.append(WRONG_QUESTION)
    if any(not a.correct and a.position not in named for a in answers):
        flags.append(MISSED_NOT_MENTIONED)
    return Checked(stated, flags)


@dataclass(frozen=True)
class Written:
    """A summary to keep: the job completes and the summary becomes the session's current
    one in one transaction, fenced by the claim; its notice is queued with them."""

    session: StudySession
    reply: LLMReply
    checked: Checked

    def write(self, job: StudyQuestionJob) -> queue.Outcome:
        db = job._state.db
        with transaction.atomic(using=db):
            summary = SessionSummary.objects.create(
                session=self.session,
                job_id=job.pk,
                text=self.reply.content,
                model=fit(SessionSummary, "model", self.reply.model),
                endpoint=self.reply.endpoint,
                prompt_tokens=self.reply.prompt_tokens,
                completion_tokens=self.reply.completion_tokens,
                tokens_counted=self.reply.tokens_counted,
                tokens_per_second=self.reply.tokens_per_second,
                flags=self.checked.flags,
                stated=self.checked.stated,
            )
            outcome = queue.complete(
                job, llm_ms=self.reply.elapsed_ms, usage=Usage.of([self.reply])
            )
            if outcome is not queue.Outcome.COMPLETED:
                transaction.set_rollback(True, using=db)  # lost its claim: keep nothing
                return outcome
            make_current(summary)
            enqueue_for_session(self.session.pk, JobKind.SESSION_NOTICE)
        logger.info(
            "study_session_summarized session=%s job=%s flags=%s",
            self.session.pk,
            job.pk,
            ",".join(self.checked.flags) or "-",
        )
        return outcome


def make_current(summary: SessionSummary) -> None:
    """Make ``summary`` its session's current one; the signal goes after the commit."""
    StudySession.objects.filter(pk=summary.session_id).update(summary=summary)
    transaction.on_commit(
        lambda: session_summarized.send_robust(
            sender=StudySession, session=summary.session, summary=summary
        ),
        using=SessionSummary.objects.all().db,
    )


def with_state(sessions: QuerySet[StudySession]) -> QuerySet[StudySession]:
    """``sessions`` with what ``status`` and ``as_json`` read, in a fixed number of queries:
    the summary, the last summary job's status, the answers with their questions."""
    jobs = StudyQuestionJob.objects.filter(
        study_session=OuterRef("pk"), kind=JobKind.SESSION_SUMMARY
    )
    return (
        sessions.select_related("summary")
        .annotate(summary_job_status=Subquery(jobs.order_by("-id").values("status")[:1]))
        .prefetch_related(
            Prefetch("answers", queryset=SessionAnswer.objects.select_related("question"))
        )
    )


# What a summary that is not written waits on, by its ``status``.
WAITING_ON = {"written": "", "waiting": "explanations", "queued": "queued", "failed": "failed"}


def _loaded(session: StudySession) -> StudySession:
    """``session`` as ``with_state`` reads it (read again unless it was)."""
    if hasattr(session, "summary_job_status"):
        return session
    return with_state(StudySession.objects.filter(pk=session.pk)).get()


def status(session: StudySession) -> str:
    """The summary's state: written, waiting (on explanations), queued, failed or none."""
    session = _loaded(session)
    last = session.summary_job_status  # type: ignore[attr-defined]
    if session.summary_id is not None:
        return "written"
    if last in (JobStatus.PENDING, JobStatus.PROCESSING):
        return "waiting" if needed(session.answers.all()) else "queued"
    return "failed" if last == JobStatus.FAILED else "none"


def as_json(session: StudySession) -> dict[str, object]:
    """A session and its summary as the API, the export and the webhook give them: the
    score, the summary's ``status`` and what it is ``waiting_on``, its text, the figures it
    stated, its flags, and when it was written."""
    session = _loaded(session)
    answers = list(session.answers.all())
    summary = session.summary
    state = status(session)
    return {
        "session": session.external_id,
        "id": session.pk,
        "learner": session.learner,
        "started_at": session.started_at.isoformat(),
        "ended_at": session.ended_at.isoformat(),
        "right": session.right,
        "total": session.total,
        "status": state,
        "waiting_on": WAITING_ON.get(state, "not_queued"),
        "text": summary.text if summary else "",
        "stated": summary.stated if summary else {},
        "flags": summary.flags if summary else [],
        "review": summary.review_status if summary else "",
        "outdated": outdated(answers),
        "written_at": summary.created_at.isoformat() if summary else None,
    }
