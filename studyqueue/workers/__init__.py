"""Job handlers: the kind registry and one module per kind, imported so each registers."""

from studyqueue.workers import explanation, key_audit, set_notice, verification  # noqa: F401
