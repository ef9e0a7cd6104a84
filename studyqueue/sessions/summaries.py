"""A study session's summary: what it needs first (the explanations of the questions its
learner missed), its prompt, the checks of what it states, and its write; the only writer of
summaries and of a session's current one."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean, median
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.dispatch import Signal
from django.utils import timezone
from django.utils.translation import gettext as _

from studyqueue.conf import conf
from studyqueue.exceptions import ReviewConflict
from studyqueue.explanations import next_step, review_queue, revisions
from studyqueue.explanations.prompts import PromptVersion, render, template_source, version_of
from studyqueue.models import (
    QUESTION_CHANGED_FLAG,
    JobKind,
    JobStatus,
    KeyAudit,
    ReviewStatus,
    SessionAnswer,
    SessionSummary,
    StudyQuestionJob,
    StudySession,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue_for_session
from studyqueue.queue.store import Fenced
from studyqueue.queue.transitions import Usage
from studyqueue.services.llm import LLMReply
from studyqueue.sessions import reading
from studyqueue.times import local_iso

logger = logging.getLogger("studyqueue.sessions")

# Sent after the commit that made a summary current: ``sender`` is ``StudySession``,
# ``session`` the session, ``summary`` the summary.
session_summarized = Signal()

SCORE_MISMATCH = "score_mismatch"  # the score it states is not the session's
NO_SCORE_STATED = "no_score_stated"  # it states no score that can be read
WRONG_QUESTION = "wrong_question"  # it says a question was missed that was answered right
MISSED_NOT_MENTIONED = "missed_not_mentioned"  # a missed question it never names
FIGURE_MISMATCH = "figure_mismatch"  # a tag's count or a time it states is not the session's
FLAGS = (SCORE_MISMATCH, NO_SCORE_STATED, WRONG_QUESTION, MISSED_NOT_MENTIONED, FIGURE_MISMATCH)

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


def changed(answer: SessionAnswer) -> bool:
    """Its question's key, choices or text were edited since the session (a deleted one keeps
    what the answer recorded: nothing teaches it otherwise)."""
    question = answer.question
    recorded = (answer.key, answer.choices, answer.question_text)
    return question is not None and (question.answer, question.choices, question.text) != recorded


def outdated(answers: Iterable[SessionAnswer]) -> bool:
    """A question was deleted or changed since the session: its summary may mislead."""
    return any(a.question is None or changed(a) for a in answers)


def scored(answers: Iterable[SessionAnswer]) -> list[SessionAnswer]:
    """The answers the summary's score counts, and the only ones given a verdict: not under
    review, not changed since the session (the session's own right/total stay as recorded)."""
    return [a for a in answers if not under_review(a) and not changed(a)]


def answers_of(session: StudySession | int) -> list[SessionAnswer]:
    """A session's answers with their questions, in order."""
    return list(SessionAnswer.objects.filter(session=session).select_related("question"))


def needed(answers: Iterable[SessionAnswer]) -> list[int]:
    """The questions whose explanation a summary waits for: missed, scored, not explained."""
    counted = scored(answers)
    return [a.question_id for a in counted if a.question_id and not a.correct and not explained(a)]


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


def messages(
    session: StudySession, answers: list[SessionAnswer], figures: dict[str, Any] | None = None
) -> list[dict[str, str]]:
    """The chat messages: fixed instructions first (the server's prompt cache), then the
    session: its figures, each answer with its question, the choice, the key, the seconds,
    the difficulty and the explanation."""
    rows, figures = [], figures or {}
    counted = scored(answers)
    for a in answers:
        held, gone = under_review(a), changed(a)
        # A changed question's explanation may teach another key than the one it had.
        explanation = "" if held or gone or a.question is None else a.question.explanation
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
                "seconds": a.seconds,
                "slow": a.position in figures.get("slow", ()),
                "difficulty": figures.get("difficulty", {}).get(str(a.position)),
                "under_review": held,
                "changed": gone,
                "explanation": explanation[:EXPLANATION_CHARS].strip(),
            }
        )
    context: dict[str, Any] = {
        "session": session,
        "answers": rows,
        "right": sum(a.correct for a in counted),
        "total": len(counted),
        "figures": figures,
        "language": _language(answers),
    }
    return [
        {"role": "system", "content": render(SYSTEM_TEMPLATE, context)},
        {"role": "user", "content": render(conf.SUMMARY_PROMPT_TEMPLATE, context)},
    ]


@dataclass(frozen=True)
class Checked:
    """What a summary states, as read (unread figures absent), and its flags."""

    stated: dict[str, float]
    flags: list[str]


def _disagree(scores: list[dict[str, float]], right: int, total: int) -> bool:
    return any(
        (s.get("right", right), s.get("total", total)) != (right, total)
        or abs(s.get("percent", 100 * right / total) - 100 * right / total) > 1
        for s in scores
    )


def _times(answers: list[SessionAnswer], counted: list[SessionAnswer]) -> list[float]:
    """The times a summary may state: each answer's seconds, and the total, median and mean
    of the scored ones (the prompt's)."""
    seconds = [a.seconds for a in counted if a.seconds is not None]
    every: list[float] = [a.seconds for a in answers if a.seconds is not None]
    return [*every, sum(seconds), median(seconds), mean(seconds)] if seconds else every


def check(
    text: str, answers: list[SessionAnswer], figures: dict[str, Any] | None = None
) -> Checked:
    """The score, the tags' counts, the times and the missed questions a summary states
    (``reading.read``), against the answers the prompt scored and the session's ``figures``
    (no call). Each figure must agree; one that cannot be read is left out, never agreeing."""
    counted = scored(answers)
    right, total = sum(a.correct for a in counted), len(counted)
    tags = (figures or {}).get("tags", {})
    said = reading.read(text, tags)
    scores = [s for f in said.figures if not f.about and (s := f.score(total))] if total else []
    stated = {k: v for score in reversed(scores) for k, v in score.items()}  # each one's first
    flags = []
    if total:
        if not scores:
            flags.append(NO_SCORE_STATED)
        elif _disagree(scores, right, total):
            flags.append(SCORE_MISMATCH)
    known = _times(answers, counted)
    per_tag = [(f.score(tags[f.about]["total"]), tags[f.about]) for f in said.figures if f.about]
    # A count the tag cannot have ("3 right" of 2) disagrees too: it is not unread.
    if any(not s or _disagree([s], tag["right"], tag["total"]) for s, tag in per_tag) or any(
        all(abs(t - k) > unit / 2 for k in known) for t, unit in said.times
    ):
        flags.append(FIGURE_MISMATCH)
    positions = {a.position: a for a in counted}
    if any(positions[n].correct for n in said.missed & positions.keys()):
        flags.append(WRONG_QUESTION)
    if any(not a.correct and a.position not in said.named for a in counted):
        flags.append(MISSED_NOT_MENTIONED)
    return Checked(stated, flags)


@dataclass(frozen=True)
class Written(Fenced):
    """A summary to keep: the job completes and the summary becomes the session's current
    one, fenced by the claim; its notice is queued with them."""

    session: StudySession
    reply: LLMReply
    checked: Checked
    figures: dict[str, Any]

    def writes(self, job: StudyQuestionJob) -> transitions.Outcome:
        summary = SessionSummary.objects.create(
            session=self.session,
            **revisions.reply_fields(job, self.reply),
            flags=self.checked.flags,
            stated=self.checked.stated,
            figures=self.figures,
        )
        outcome = transitions.complete(
            job, llm_ms=self.reply.elapsed_ms, usage=Usage.of([self.reply])
        )
        if outcome is transitions.Outcome.COMPLETED:
            make_current(summary)
            enqueue_for_session(self.session.pk, JobKind.SESSION_NOTICE)
            logger.info(
                "study_session_summarized session=%s job=%s flags=%s",
                self.session.pk,
                job.pk,
                ",".join(self.checked.flags) or "-",
            )
        return outcome


def review(
    session_id: int, summary_id: int, decision: str, *, by: str, seen: str, text: str = ""
) -> None:
    """Apply a reviewer's decision on the session's current summary as the page showed it
    (``seen``: its review status); an edit becomes the new current summary, a rejection queues
    another. ``ReviewConflict`` when it was replaced or decided meanwhile, ``ValueError`` for a
    bad decision or text (``review_queue.decision_text``): nothing is written then."""
    text = review_queue.decision_text(decision, text)
    sessions = StudySession.objects.select_for_update()
    with transaction.atomic(using=sessions.db):
        # The session's lock orders this decision with another reviewer's and a new summary.
        session = sessions.filter(pk=session_id).first()
        now = timezone.now()
        shown = SessionSummary.objects.filter(pk=summary_id, session=session_id, review_status=seen)
        if (
            session is None
            or session.summary_id != summary_id
            or not shown.update(review_status=decision, reviewed_by=by, reviewed_at=now)
        ):
            raise ReviewConflict(_("Nothing decided: this summary changed meanwhile."))
        if decision == ReviewStatus.EDITED:
            figures = SessionSummary.objects.get(pk=summary_id).figures  # what it was written to
            checked = check(text, answers_of(session), figures)
            edited = SessionSummary.objects.create(
                session=session,
                text=text,
                flags=checked.flags,
                stated=checked.stated,
                figures=figures,
                **revisions.edited_by(by, now),
            )
            make_current(edited)
        elif decision == ReviewStatus.REJECTED:
            queue_summaries([session])
    logger.info(
        "study_summary_reviewed session=%s summary=%s review=%s by=%s",
        session_id,
        summary_id,
        decision,
        by,
    )


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
    summary = session.summary
    state = status(session)
    return {
        "session": session.external_id,
        "id": session.pk,
        "learner": session.learner,
        "started_at": local_iso(session.started_at),
        "ended_at": local_iso(session.ended_at),
        "right": session.right,
        "total": session.total,
        "status": state,
        "waiting_on": WAITING_ON.get(state, "not_queued"),
        "text": summary.text if summary else "",
        "stated": summary.stated if summary else {},
        "flags": summary.flags if summary else [],
        "figures": summary.figures if summary else {},
        "review": summary.review_status if summary else "",
        "outdated": outdated(session.answers.all()),
        "written_at": local_iso(summary.created_at) if summary else None,
    }
