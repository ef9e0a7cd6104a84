"""Exit 0 when studyqueue is healthy, else non-zero with a one-line reason."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.monitoring.health import CHECKS, run_checks


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Check the database (reachable, migrated), the consumers (one ran a cycle lately) and "
        "the LLM servers the live consumers use (reachable; this process's LLM_URL when none "
        "is live), each named; pick some with --db, --consumer, --llm (default: all)."
    )
    requires_system_checks: list[str] = []  # a probe: fast, and it says itself what is wrong

    def add_arguments(self, parser: CommandParser) -> None:
        for name in CHECKS:
            parser.add_argument(
                f"--{name}", action="store_true", help=_("check the %(name)s") % {"name": name}
            )

    def handle(self, *args: Any, **options: Any) -> None:
        chosen = tuple(name for name in CHECKS if options[name]) or CHECKS
        checks = run_checks(chosen)
        failed = [c for c in checks if not c.ok]
        if failed:
            raise CommandError("; ".join(f"{c.name}: {c.detail}" for c in failed))
        details = "; ".join(f"{c.name}: {c.detail}" for c in checks)
        self.stdout.write(_("ok: %(details)s") % {"details": details})
