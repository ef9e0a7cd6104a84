"""The operator's admin: jobs, questions, pauses, consumers, the queue dashboard and the
review page.

State changes happen only through actions that call ``studyqueue.queue.transitions`` (the same
functions as the commands and the consumer); every field of a job is read-only.
"""

from studyqueue.admin import (  # noqa: F401
    consumers,
    dashboard,
    jobs,
    pauses,
    question_sets,
    questions,
    review,
    revisions,
)
