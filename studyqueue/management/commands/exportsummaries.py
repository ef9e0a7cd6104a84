"""Export study sessions with their summary, a row per session, streamed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.management.commands._files import exported
from studyqueue.management.commands._options import question_set, set_option
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import StudySession
from studyqueue.sessions import summaries

# The keys of ``summaries.as_json``, in the CSV's order.
FIELDS = (
    "session", "id", "learner", "started_at", "ended_at", "right", "total", "status",
    "waiting_on", "text", "stated", "flags", "figures", "review", "outdated", "written_at",
)  # fmt: skip


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Export study sessions with their summary: score, status, text, flags and what a "
        "summary not yet written waits on."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format", choices=("jsonl", "csv"), default="jsonl", help=_("default: jsonl")
        )
        parser.add_argument("--output", help=_("a file (default: standard output)"))
        parser.add_argument("--learner", help=_("only this learner's sessions"))
        set_option(parser, _("only the sessions of this question set"))

    def handle(
        self,
        *args: Any,
        format: str,
        output: str | None,
        learner: str | None,
        set_name: str | None,
        **options: Any,
    ) -> None:
        sessions = summaries.with_state(StudySession.objects.order_by("pk"))
        if learner is not None:
            sessions = sessions.filter(learner=learner)
        if set_name is not None:
            sessions = sessions.filter(question_set=question_set(set_name))
        rows = (summaries.as_json(s) for s in sessions.iterator(chunk_size=500))
        count = exported(self, rows, output, format, fields=FIELDS)
        self.stderr.write(_("exported %(count)s session(s)") % {"count": count})
