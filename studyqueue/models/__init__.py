"""studyqueue's models by concept: ``base`` (the database rule, the shared manager, what a
column holds), ``questions`` (questions, revisions, reviews, the key audit's state), ``jobs``
(jobs, attempts, pauses, consumers), ``gate`` (limits, leases), ``sets`` (question sets) and
``sessions`` (study sessions, their answers and summaries).
Each imports only those before it; what the rest of the app uses is importable from here."""

from studyqueue.models.base import MAX_ID, database, fit, storable, unstorable, width
from studyqueue.models.gate import GateLease, GateLimit
from studyqueue.models.jobs import (
    ACTIVE_STATUSES,
    ATTEMPT_OUTCOMES,
    CHECK_KINDS,
    KIND_SPECS,
    QUESTION_KINDS,
    ErrorCode,
    JobAttempt,
    JobKind,
    JobQuerySet,
    JobStatus,
    KindSpec,
    Outcome,
    QueueConsumer,
    QueueDashboard,
    QueuePause,
    StudyQuestionJob,
    checks_after_explanation,
    default_max_attempts,
    delivery_kinds,
    kind_priority,
    kind_waits,
    register_kind,
)
from studyqueue.models.questions import (
    PROTECTED_REVIEWS,
    QUESTION_CHANGED_FLAG,
    ExplanationReview,
    ExplanationRevision,
    FinishReason,
    KeyAudit,
    KeyCheck,
    QuestionQuerySet,
    ReviewStatus,
    StepCheck,
    StudyQuestion,
    Tag,
    awaiting_key_check,
    key_audit_holds,
    revision_to_verify,
    tag_names,
    validate_choices,
)
from studyqueue.models.sessions import SessionAnswer, SessionSummary, StudySession, XapiStatement
from studyqueue.models.sets import StudyQuestionSet
