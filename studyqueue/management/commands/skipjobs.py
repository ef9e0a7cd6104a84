"""Skip pending (or processing) jobs in bulk: what the admin's action does, for any number."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils.translation import gettext, gettext_lazy

from studyqueue.management.commands._jobsets import JobSetCommand
from studyqueue.models import JobStatus
from studyqueue.queue import operations


class Command(JobSetCommand):
    help = gettext_lazy(
        "Mark pending or processing jobs skipped (operator_skipped), in bounded batches."
    )
    statuses = [JobStatus.PENDING, JobStatus.PROCESSING]

    would = gettext_lazy("Would skip up to %(count)s job(s).")

    def act(self, batches: Iterator[list[int]]) -> str:
        skipped = sum(len(operations.skip(batch).skipped) for batch in batches)
        return gettext("Skipped %(count)s job(s).") % {"count": skipped}
