"""App configuration."""

from django.apps import AppConfig


class StudyQueueConfig(AppConfig):
    name = "studyqueue"
    verbose_name = "Study queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the system checks.
        from studyqueue import checks  # noqa: F401
