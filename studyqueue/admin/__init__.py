"""The operator's admin. State changes happen only through actions that call the same
functions as the commands and the consumer; every field of a job is read-only."""

from studyqueue.admin import (  # noqa: F401
    consumers,
    dashboard,
    jobs,
    pauses,
    question_sets,
    questions,
    review,
    revisions,
    sessions,
)
