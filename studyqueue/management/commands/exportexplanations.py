"""Export questions with their current explanation, streamed (constant memory)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, time
from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.explanations import export
from studyqueue.management.commands import _outdated
from studyqueue.management.commands._files import exported
from studyqueue.management.commands._options import flag, question_set, set_option
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.sets import question_sets


def moment(value: str) -> datetime:
    """A date (midnight UTC) or an ISO date-time; argparse's ``type``."""
    parsed = parse_datetime(value)
    if parsed is None:
        day = parse_date(value)
        if day is None:
            raise ValueError(value)
        parsed = datetime.combine(day, time.min)
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)


moment.__name__ = "date"  # argparse's error: "invalid date value"


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Export explained questions with their explanation, model, prompt version, flags, "
        "stated answer, review status and the checks' answers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format",
            choices=export.FORMATS,
            default="jsonl",
            help=_("moodle: a Moodle XML quiz, each explanation its question's general feedback"),
        )
        parser.add_argument("--since", type=moment, help=_("explained at or after (a date)"))
        flag(
            parser,
            "--outdated",
            _(
                "only explanations none of the live consumers' prompt versions wrote (with "
                "no live consumer: these settings' version)"
            ),
        )
        flag(
            parser,
            "--approved",
            _(
                "only explanations a reviewer approved or corrected (review_status approved "
                "or edited)"
            ),
        )
        flag(
            parser,
            "--include-missing",
            _(
                "also a row for every question without an explanation (explanation null), "
                "with what it waits on (waiting_on: key_check, key_audit, queued, failed or "
                "not_queued)"
            ),
        )
        set_option(parser, _("only the questions of this question set"))
        parser.add_argument("--output", help=_("a file (default: standard output)"))
        flag(
            parser,
            "--no-bom",
            _(
                "CSV: leave out the UTF-8 byte-order mark written first by default (without "
                "it, Excel on Korean Windows reads the file as CP949)"
            ),
        )

    def handle(
        self,
        *args: Any,
        format: str,
        since: datetime | None,
        outdated: bool,
        approved: bool,
        include_missing: bool,
        output: str | None,
        no_bom: bool,
        set_name: str | None,
        **options: Any,
    ) -> None:
        ids = None
        if set_name is not None:
            ids = question_sets.questions(question_set(set_name)).values_list("pk", flat=True)
        rows = export.export_rows(
            since=since,
            outdated_for=_outdated.versions(self) if outdated else None,
            approved=approved,
            include_missing=include_missing,
            ids=ids,
        )
        left_out: Counter[str] = Counter()
        count = exported(self, rows, output, format, bom=not no_bom, left_out=left_out)
        for reason, number in left_out.items():
            shown = {"count": number, "reason": reason}
            self.stderr.write(_("left out %(count)s question(s): %(reason)s") % shown)
        shown = {"count": count, "file": output}
        if output is None:
            self.stderr.write(_("exported %(count)s question(s)") % shown)
        else:
            self.stderr.write(_("exported %(count)s question(s) to %(file)s") % shown)
