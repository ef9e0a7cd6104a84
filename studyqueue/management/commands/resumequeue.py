"""Resume a paused queue."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from studyqueue import queue
from studyqueue.models import JobKind


class Command(BaseCommand):
    help = "Resume the queue (the pause of every kind, or of --kind K)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--kind", choices=JobKind.values, default="", help="resume one kind (default: all)"
        )

    def handle(self, *args: Any, kind: str, **options: Any) -> None:
        scope = kind or "every kind"
        if queue.resume(kind):
            self.stdout.write(f"Resumed for {scope}.")
            return
        still = [k or "every kind" for k in queue.paused_kinds()]
        note = f" Still paused: {', '.join(still)}." if still else ""
        self.stdout.write(f"The queue was not paused for {scope}.{note}")
