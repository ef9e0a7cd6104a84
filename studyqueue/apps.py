"""App configuration."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class StudyQueueConfig(AppConfig):
    name = "studyqueue"
    verbose_name = _("Study queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the system checks.
        from studyqueue import checks  # noqa: F401
