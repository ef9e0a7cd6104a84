"""What ``retryjobs`` and ``skipjobs`` share: the jobs an operator picks by status, kind and
error code, acted on in bounded batches (the admin's actions stop at ``ACTION_LIMIT`` rows)."""

from __future__ import annotations

from collections.abc import Iterator

from django.core.management.base import CommandParser
from django.utils.translation import gettext

from studyqueue import queue
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob

BATCH = 10_000  # ids per queue call: each call works in OPERATOR_BATCH statements


def add_filters(parser: CommandParser, statuses: list[str], default: str) -> None:
    parser.add_argument(
        "--status",
        choices=statuses,
        action="append",
        help=gettext("jobs in this status; repeatable (default: %(default)s)")
        % {"default": default},
    )
    parser.add_argument("--kind", choices=JobKind.values, help=gettext("only jobs of this kind"))
    parser.add_argument(
        "--error-code", choices=ErrorCode.values, help=gettext("only jobs with this code")
    )
    parser.add_argument(
        "--dry-run", action="store_true", help=gettext("count them; change nothing")
    )


def id_batches(
    statuses: list[str], kind: str | None, error_code: str | None
) -> Iterator[list[int]]:
    """The ids of the picked jobs, in batches of ``BATCH``, oldest first."""
    jobs = StudyQuestionJob.objects.using(queue.database()).filter(status__in=statuses)
    if kind:
        jobs = jobs.filter(kind=kind)
    if error_code:
        jobs = jobs.filter(error_code=error_code)
    batch: list[int] = []
    for pk in jobs.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=BATCH):
        batch.append(pk)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
