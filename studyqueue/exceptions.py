"""Exceptions raised by studyqueue."""

from django.core.exceptions import ImproperlyConfigured


class StudyQueueError(Exception):
    """Base class for studyqueue errors."""


class EnqueueError(StudyQueueError, ValueError):
    """A job could not be enqueued because the input is invalid."""


class SettingsError(ImproperlyConfigured):
    """A STUDYQUEUE setting or its environment variable has an invalid value."""


class ReviewConflict(StudyQueueError):
    """What a reviewer judged changed meanwhile (decided by another, or a newer reply)."""


class UnchangedEdit(StudyQueueError):
    """A reviewer saved a correction that changes nothing: no edit, nothing decided."""
