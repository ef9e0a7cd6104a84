"""Pause the queue: consumers claim nothing of it until ``resumequeue``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from studyqueue import queue
from studyqueue.models import JobKind


class Command(BaseCommand):
    help = "Pause the queue (every kind, or --kind K): running jobs finish, nothing new starts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--kind", choices=JobKind.values, default="", help="pause one kind (default: all)"
        )
        parser.add_argument("--reason", default="", help="why, shown to operators")

    def handle(self, *args: Any, kind: str, reason: str, **options: Any) -> None:
        row, created = queue.pause(kind, reason=reason, by="manage.py pausequeue")
        scope = kind or "every kind"
        if not created:
            self.stdout.write(
                f"Already paused for {scope} since {row.paused_at:%Y-%m-%d %H:%M} UTC "
                f"by {row.paused_by or '-'}: {row.reason or '(no reason)'}"
            )
            return
        self.stdout.write(f"Paused for {scope}. Resume with: manage.py resumequeue{_kind(kind)}")


def _kind(kind: str) -> str:
    return f" --kind {kind}" if kind else ""
