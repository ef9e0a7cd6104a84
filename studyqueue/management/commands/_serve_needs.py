"""What ``serve`` needs from a project's settings, checked before anything starts (each gap
showed up late and obscurely; docs/howto/install.md lists the settings)."""

from __future__ import annotations

from django.conf import settings
from django.db import connections
from django.utils.translation import gettext as _

from studyqueue.models import StudyQuestionJob
from studyqueue.queue import sql

WHITENOISE = "whitenoise.middleware.WhiteNoiseMiddleware"


def missing() -> list[str]:
    """The settings ``serve`` needs and the project lacks, each in a few words."""
    gaps = []
    if not getattr(settings, "STATIC_ROOT", None):
        gaps.append(_("STATIC_ROOT (where collectstatic puts the admin's CSS)"))
    if WHITENOISE not in settings.MIDDLEWARE:
        gaps.append(
            _("%(middleware)s in MIDDLEWARE (the admin's CSS)") % {"middleware": WHITENOISE}
        )
    connection = connections[StudyQuestionJob.objects.all().db]  # studyqueue's
    if sql.vendor(connection.alias) == "sqlite":
        if connection.settings_dict.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE":
            gaps.append(_('SQLite OPTIONS "transaction_mode": "IMMEDIATE"'))
        with connection.cursor() as cursor:
            # The journal mode is kept in the database file: ask the file, not the settings.
            cursor.execute("PRAGMA journal_mode")
            (mode,) = cursor.fetchone()
        if mode.lower() != "wal":
            gaps.append(_('SQLite OPTIONS "init_command": "PRAGMA journal_mode=WAL"'))
    return gaps
