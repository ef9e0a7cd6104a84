"""Import study sessions from JSON Lines: every line checked first; a session recorded
before is known again, not recorded twice."""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.explanations import transfer
from studyqueue.management.commands import _files
from studyqueue.management.commands._options import flag
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import StudySession
from studyqueue.sessions import recording, summaries, xapi


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Import study sessions from a .jsonl file, one session a line; a file with a bad "
        "line records nothing unless --skip-invalid."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help=_("a .jsonl file, or - for standard input"))
        flag(parser, "--skip-invalid", _("record the good lines, report the rest"))
        flag(
            parser,
            "--enqueue",
            _("queue a summary job for each session recorded (and the explanations it needs)"),
        )

        parser.add_argument(
            "--format",
            choices=["jsonl", "xapi"],
            default="jsonl",
            help=_(
                "jsonl: a session a line; xapi: xAPI statements, a JSON array or one a line, "
                "recorded whole, each session with its summary job"
            ),
        )

    def handle(
        self, *args: Any, file: str, skip_invalid: bool, enqueue: bool, format: str, **options: Any
    ) -> None:
        if format == "xapi" and skip_invalid:
            raise CommandError(_("--skip-invalid: a file of xAPI statements is recorded whole"))
        with _files.reading(file) as stream:
            text = stream.read() if format == "xapi" else ""
            records = list(transfer.json_lines(io.StringIO(text) if text else stream))
        if format == "xapi":
            return self._statements(text, records)
        errors: list[tuple[int, str]] = []
        checked: list[tuple[int, recording.Session]] = []
        for line, record in records:
            try:
                if isinstance(record, ValueError):
                    raise record  # a line that is not JSON
                checked.append((line, recording.check(record)))
            except ValueError as exc:  # recording.Invalid: every reason of the line
                errors.append((line, str(exc)))
        if errors and not skip_invalid:
            raise _invalid(errors, len(checked))
        created: list[StudySession] = []
        known = 0
        progress = _files.progress(
            self.stderr, len(checked), _("recorded %(done)s/%(total)s sessions")
        )
        # One transaction: a conflict found while recording leaves nothing recorded.
        with transaction.atomic(using=StudySession.objects.all().db):
            for line, session in checked:
                try:
                    row, new = recording.record(session)
                except recording.Conflict as exc:
                    errors.append((line, str(exc)))
                    continue
                finally:
                    progress(1)
                if new:
                    created.append(row)
                else:
                    known += 1
            if errors and not skip_invalid:
                raise _invalid(errors, len(checked) - len(errors))
            # With the sessions: one recorded without its job would never get it, a
            # re-import finding it already recorded.
            queued = summaries.queue_summaries(created) if enqueue else 0
        if errors:
            skipped = _("skipped %(invalid)s invalid line(s):")
            self.stderr.write(_files.bad_rows(skipped, sorted(errors)))
        jobs = _("; queued %(count)s summary job(s)") % {"count": queued} if enqueue else ""
        self.stdout.write(
            _(
                "Recorded %(created)s session(s), %(known)s already recorded, "
                "%(skipped)s skipped%(queued)s."
            )
            % {"created": len(created), "known": known, "skipped": len(errors), "queued": jobs}
        )

    def _statements(self, text: str, records: list[tuple[int, Any]]) -> None:
        """Store the statements and record the sessions they end or that are idle."""
        if text.lstrip().startswith("["):
            try:
                records = [(1, json.loads(text))]
            except ValueError as exc:
                records = [(1, exc)]
        if bad := [(line, str(value)) for line, value in records if isinstance(value, ValueError)]:
            raise _invalid(bad, len(records) - len(bad))
        statements = [
            v for _line, value in records for v in (value if isinstance(value, list) else [value])
        ]
        try:
            with transaction.atomic(using=StudySession.objects.all().db):
                ids, recorded = xapi.receive(statements, None)
                recorded += xapi.close_idle(timezone.now())
        except (recording.Invalid, recording.Conflict) as exc:
            reasons = getattr(exc, "reasons", [str(exc)])
            raise CommandError(_("nothing recorded:") + "\n" + "\n".join(reasons)) from None
        self.stdout.write(
            _("Read %(statements)s statement(s); recorded %(sessions)s session(s).")
            % {"statements": len(ids), "sessions": recorded}
        )


def _invalid(errors: list[tuple[int, str]], valid: int) -> CommandError:
    invalid = _(
        "%(invalid)s invalid line(s); nothing recorded "
        "(--skip-invalid records the %(valid)s valid ones):"
    )
    return CommandError(_files.bad_rows(invalid, errors, valid))
