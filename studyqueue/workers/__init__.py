"""Job handlers: the kind registry and one module per kind, imported so each registers."""

from studyqueue.workers import (  # noqa: F401
    explanation,
    key_audit,
    session_notice,
    session_summary,
    set_notice,
    step_check,
    verification,
)
