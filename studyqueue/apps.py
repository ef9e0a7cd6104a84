"""App configuration."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class StudyQueueConfig(AppConfig):
    name = "studyqueue"
    verbose_name = _("Study queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the system checks, and every job kind's spec: the claim is assembled from
        # the kinds' waits, so no process may claim before they are known.
        from studyqueue import checks, workers  # noqa: F401
