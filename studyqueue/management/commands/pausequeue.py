"""Pause the queue: consumers claim nothing of it until ``resumequeue``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue import times
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import JobKind
from studyqueue.queue import pauses


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Pause the queue (every kind, or --kind K): running jobs finish, nothing new starts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--kind", choices=JobKind.values, default="", help=_("pause one kind (default: all)")
        )
        parser.add_argument("--reason", default="", help=_("why, shown to operators"))

    def handle(self, *args: Any, kind: str, reason: str, **options: Any) -> None:
        row, created = pauses.pause(kind, reason=reason, by="manage.py pausequeue")
        scope = kind or _("every kind")
        if not created:
            self.stdout.write(
                _("Already paused for %(scope)s since %(since)s by %(by)s: %(reason)s")
                % {
                    "scope": scope,
                    "since": times.shown(row.paused_at),  # local time, as the admin shows it
                    "by": row.paused_by or "-",
                    "reason": row.reason or _("(no reason)"),
                }
            )
            return
        command = "manage.py resumequeue" + (f" --kind {kind}" if kind else "")
        self.stdout.write(
            _("Paused for %(scope)s. Resume with: %(command)s")
            % {"scope": scope, "command": command}
        )
