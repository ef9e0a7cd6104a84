"""What ``retryjobs`` and ``skipjobs`` share: the jobs an operator picks by status, kind and
error code, acted on in bounded batches (the admin's actions stop at ``ACTION_LIMIT`` rows)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any, ClassVar

from django.core.management.base import CommandParser
from django.utils.functional import Promise
from django.utils.translation import gettext as _

from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob

BATCH = 10_000  # ids per queue call: each call works in OPERATOR_BATCH statements


def id_batches(
    statuses: list[str], kind: str | None, error_code: str | None
) -> Iterator[list[int]]:
    """The ids of the picked jobs, in batches of ``BATCH``, oldest first."""
    jobs = StudyQuestionJob.objects.filter(status__in=statuses)
    if kind:
        jobs = jobs.filter(kind=kind)
    if error_code:
        jobs = jobs.filter(error_code=error_code)
    ids = jobs.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=BATCH)
    while batch := list(islice(ids, BATCH)):
        yield batch


class JobSetCommand(TranslatedCommand):
    """A command that acts on the jobs an operator picks, batch by batch: ``statuses`` are
    the ones it may act on (the first is the default); subclasses say what it does (``act``)
    and what ``--dry-run`` says of ``%(count)s`` picked jobs (``would``)."""

    statuses: ClassVar[list[str]]
    would: ClassVar[Promise]
    help: str | Promise = ""  # marked with gettext_lazy, as in TranslatedCommand

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status",
            choices=self.statuses,
            action="append",
            help=_("jobs in this status; repeatable (default: %(default)s)")
            % {"default": self.statuses[0]},
        )
        parser.add_argument("--kind", choices=JobKind.values, help=_("only jobs of this kind"))
        parser.add_argument(
            "--error-code", choices=ErrorCode.values, help=_("only jobs with this code")
        )
        parser.add_argument("--dry-run", action="store_true", help=_("count them; change nothing"))

    def handle(
        self,
        *args: Any,
        status: list[str] | None,
        kind: str | None,
        error_code: str | None,
        dry_run: bool,
        **options: Any,
    ) -> None:
        picked = id_batches(status or [self.statuses[0]], kind, error_code)
        said = self.would % {"count": sum(map(len, picked))} if dry_run else self.act(picked)
        self.stdout.write(said)

    def act(self, batches: Iterator[list[int]]) -> str:
        """Act on every batch; what happened, as one line."""
        raise NotImplementedError
