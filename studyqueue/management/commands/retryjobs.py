"""Retry failed (or skipped) jobs in bulk: what the admin's action does, for any number."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils.translation import gettext, gettext_lazy

from studyqueue.management.commands._jobsets import JobSetCommand
from studyqueue.models import JobStatus
from studyqueue.queue.operations import refusals, retry_ended


class Command(JobSetCommand):
    help = gettext_lazy(
        "Put failed or skipped jobs back to pending with attempts reset, in bounded batches."
    )
    statuses = [JobStatus.FAILED, JobStatus.SKIPPED]

    would = gettext_lazy("Would retry up to %(count)s job(s).")

    def act(self, batches: Iterator[list[int]]) -> str:
        retried = 0
        active_for: dict[int, int | None] = {}
        for batch in batches:
            result = retry_ended(batch)
            retried += len(result.retried)
            active_for.update(result.active_for)
        if not active_for:
            return gettext(
                "Retried %(retried)s job(s); %(conflicts)s refused: their question already has "
                "an active job of the same kind."
            ) % {"retried": retried, "conflicts": 0}
        return gettext(
            "Retried %(retried)s job(s); %(conflicts)s refused: their question already has "
            "an active job of the same kind (refused → active: %(jobs)s)."
        ) % {"retried": retried, "conflicts": len(active_for), "jobs": refusals(active_for)}
