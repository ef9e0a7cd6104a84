"""Skip pending (or processing) jobs in bulk: what the admin's action does, for any number."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.translation import gettext

from studyqueue import queue
from studyqueue.management.commands._jobsets import add_filters, id_batches
from studyqueue.models import JobStatus


class Command(BaseCommand):
    help = "Mark pending or processing jobs skipped (operator_skipped), in bounded batches."

    def add_arguments(self, parser: CommandParser) -> None:
        add_filters(parser, [JobStatus.PENDING, JobStatus.PROCESSING], default=JobStatus.PENDING)

    def handle(
        self,
        *args: Any,
        status: list[str] | None,
        kind: str | None,
        error_code: str | None,
        dry_run: bool,
        **options: Any,
    ) -> None:
        picked = id_batches(status or [JobStatus.PENDING], kind, error_code)
        if dry_run:
            count = sum(len(batch) for batch in picked)
            self.stdout.write(gettext("Would skip up to %(count)s job(s).") % {"count": count})
            return
        skipped = sum(len(queue.skip(batch).skipped) for batch in picked)
        self.stdout.write(gettext("Skipped %(count)s job(s).") % {"count": skipped})
