"""Queue jobs for study questions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from studyqueue import queue
from studyqueue.management.commands._options import object_id
from studyqueue.models import JobKind, StudyQuestion, StudyQuestionJob


class Command(BaseCommand):
    help = "Queue jobs: for given questions, or for every question still missing an explanation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--missing",
            action="store_true",
            help="every question with text, no explanation and no active job of this kind",
        )
        parser.add_argument(
            "--question", type=object_id, nargs="+", default=[], metavar="ID", help="question ids"
        )
        parser.add_argument(
            "--kind",
            choices=JobKind.values,
            default=JobKind.EXPLANATION,
            help="job kind (default: %(default)s)",
        )

    def handle(
        self, *args: Any, missing: bool, question: list[int], kind: str, **options: Any
    ) -> None:
        if not missing and not question:
            raise CommandError("nothing to enqueue: give --missing or --question ID ...")
        ids: set[int] = set()
        if question:
            found = set(StudyQuestion.objects.filter(pk__in=question).values_list("pk", flat=True))
            unknown = sorted(set(question) - found)
            if unknown:
                raise CommandError(
                    f"no study question with id {', '.join(map(str, unknown))}; nothing queued"
                )
            ids |= found
        if missing:
            active = StudyQuestionJob.objects.active().filter(kind=kind)
            ids |= set(
                StudyQuestion.objects.filter(explanation="")
                .exclude(text="")
                .exclude(pk__in=active.values("study_question_id"))
                .values_list("pk", flat=True)
            )
        created = queue.enqueue_many(sorted(ids), kind)
        self.stdout.write(f"Created {created} {kind} job(s); {len(ids) - created} already queued.")
