"""Job handlers: the kind registry (``registry``) and one module per job kind, imported
here so that each registers its handler."""

from studyqueue.workers import explanation

__all__ = ["explanation"]
