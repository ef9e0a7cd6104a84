"""studyqueue's models by concept: ``base`` (the database rule, the shared manager, what a
column holds), ``questions`` (questions, revisions, reviews, the key audit's state), ``jobs``
(jobs, attempts, pauses, consumers), ``gate`` (limits, leases) and ``sets`` (question sets).
Each imports only those before it; everything is importable from here."""

from studyqueue.models.base import (
    ENDPOINT_WIDTH,
    MAX_ID,
    StudyQueueManager,
    choice_width,
    database,
    endpoint_field,
    fit,
    storable,
    unstorable,
    width,
)
from studyqueue.models.gate import GateLease, GateLimit
from studyqueue.models.jobs import (
    ACTIVE_STATUSES,
    ATTEMPT_OUTCOMES,
    FINISHED_STATUSES,
    KIND_PRIORITY,
    ErrorCode,
    JobAttempt,
    JobKind,
    JobManager,
    JobQuerySet,
    JobStatus,
    Outcome,
    QueueConsumer,
    QueueDashboard,
    QueuePause,
    StudyQuestionJob,
    default_max_attempts,
    error_code_field,
    waiting_for_key_audit,
)
from studyqueue.models.questions import (
    PROTECTED_REVIEWS,
    QUESTION_CHANGED_FLAG,
    ExplanationReview,
    ExplanationRevision,
    FinishReason,
    KeyAudit,
    KeyCheck,
    QuestionManager,
    QuestionQuerySet,
    ReviewStatus,
    StudyQuestion,
    awaiting_key_check,
    key_audit_holds,
    revision_to_verify,
    validate_choices,
)
from studyqueue.models.sets import StudyQuestionSet
