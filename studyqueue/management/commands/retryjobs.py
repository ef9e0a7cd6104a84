"""Retry failed (or skipped) jobs in bulk: what the admin's action does, for any number."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.translation import gettext

from studyqueue import queue
from studyqueue.management.commands._jobsets import add_filters, id_batches
from studyqueue.models import JobStatus


class Command(BaseCommand):
    help = "Put failed or skipped jobs back to pending with attempts reset, in bounded batches."

    def add_arguments(self, parser: CommandParser) -> None:
        add_filters(parser, [JobStatus.FAILED, JobStatus.SKIPPED], default=JobStatus.FAILED)

    def handle(
        self,
        *args: Any,
        status: list[str] | None,
        kind: str | None,
        error_code: str | None,
        dry_run: bool,
        **options: Any,
    ) -> None:
        picked = id_batches(status or [JobStatus.FAILED], kind, error_code)
        if dry_run:
            count = sum(len(batch) for batch in picked)
            self.stdout.write(gettext("Would retry up to %(count)s job(s).") % {"count": count})
            return
        retried = conflicts = 0
        for batch in picked:
            result = queue.retry(batch)
            retried += len(result.retried)
            conflicts += len(result.conflicts)
        self.stdout.write(
            gettext(
                "Retried %(retried)s job(s); %(conflicts)s refused: their question already has "
                "an active job of the same kind."
            )
            % {"retried": retried, "conflicts": conflicts}
        )
