"""Resume a paused queue."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import JobKind
from studyqueue.queue import pauses


class Command(TranslatedCommand):
    help = gettext_lazy("Resume the queue (the pause of every kind, or of --kind K).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--kind", choices=JobKind.values, default="", help=_("resume one kind (default: all)")
        )

    def handle(self, *args: Any, kind: str, **options: Any) -> None:
        scope = kind or _("every kind")
        if pauses.resume(kind):
            self.stdout.write(_("Resumed for %(scope)s.") % {"scope": scope})
            return
        message = _("The queue was not paused for %(scope)s.") % {"scope": scope}
        if still := [k or _("every kind") for k in pauses.paused_kinds()]:
            message += " " + _("Still paused: %(kinds)s.") % {"kinds": ", ".join(still)}
        self.stdout.write(message)
