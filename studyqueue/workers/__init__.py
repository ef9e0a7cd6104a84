"""Job handlers: the kind registry (``registry``) and one module per job kind, imported
here so that each registers its handler."""

from studyqueue.workers import explanation, key_audit, set_notice, verification

__all__ = ["explanation", "key_audit", "set_notice", "verification"]
