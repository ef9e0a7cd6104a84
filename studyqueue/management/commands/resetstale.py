"""Reset stale processing jobs (no heartbeat for a while) back to pending."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from studyqueue import queue
from studyqueue.conf import conf
from studyqueue.management.commands._options import bounded_float

# A century: far past any real threshold, and still a date the database can hold.
MAX_MINUTES = 100 * 365 * 24 * 60


class Command(BaseCommand):
    help = "Reset processing jobs with no recent heartbeat to pending (or failed if exhausted)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--minutes",
            type=bounded_float(MAX_MINUTES),
            default=None,
            help="stale threshold in minutes (default: STUDYQUEUE STALE_MINUTES)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would change; change nothing"
        )

    def handle(self, *args: Any, minutes: float | None, dry_run: bool, **options: Any) -> None:
        minutes = conf.STALE_MINUTES if minutes is None else minutes
        result = queue.reset_stale(older_than=timedelta(minutes=minutes), dry_run=dry_run)
        verb = "Would reset" if dry_run else "Reset"
        ended = "would end" if dry_run else "ended"
        self.stdout.write(
            f"{verb} {result.reset} stale job(s) to pending; {result.failed} {ended} failed "
            f"(no heartbeat for {minutes:g} min)."
        )
