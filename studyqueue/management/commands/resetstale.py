"""Reset stale processing jobs (no heartbeat for a while) back to pending."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.conf import conf
from studyqueue.management.commands._options import bounded_float, flag
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.queue import transitions

# A century: far past any real threshold, and still a date the database can hold.
MAX_MINUTES = 100 * 365 * 24 * 60


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Reset processing jobs with no recent heartbeat to pending (or failed if exhausted)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--minutes",
            type=bounded_float(MAX_MINUTES),
            help=_("stale threshold in minutes (default: STUDYQUEUE STALE_MINUTES)"),
        )
        flag(parser, "--dry-run", _("count what would change; change nothing"))

    def handle(self, *args: Any, minutes: float | None, dry_run: bool, **options: Any) -> None:
        minutes = conf.STALE_MINUTES if minutes is None else minutes
        result = transitions.reset_stale(older_than=timedelta(minutes=minutes), dry_run=dry_run)
        if dry_run:
            message = _(
                "Would reset %(reset)s stale job(s) to pending; %(failed)s would end failed "
                "(no heartbeat for %(minutes)s min)."
            )
        else:
            message = _(
                "Reset %(reset)s stale job(s) to pending; %(failed)s ended failed "
                "(no heartbeat for %(minutes)s min)."
            )
        values = {"reset": result.reset, "failed": result.failed, "minutes": f"{minutes:g}"}
        self.stdout.write(message % values)
