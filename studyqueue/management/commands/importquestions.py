"""Import questions from JSON Lines, CSV, Moodle XML, GIFT or Aiken: every row checked
first; re-imports update."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue import times
from studyqueue.explanations import transfer
from studyqueue.management.commands import _files
from studyqueue.management.commands._options import flag, local_moment, set_option
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import StudyQuestion
from studyqueue.sets import question_sets


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Import questions (text, choices, answer, external_id, tags) from a .jsonl, .csv, "
        "Moodle XML (.xml), GIFT (.gift) or Aiken file; a file with a bad row imports "
        "nothing unless --skip-invalid."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help=_("a question file, or - for standard input"))
        parser.add_argument(
            "--format",
            choices=transfer.FORMATS,
            help=_("default: by extension (.jsonl, .csv, .xml, .gift); an Aiken file needs it"),
        )
        flag(parser, "--skip-invalid", _("import the good rows, report the rest"))
        flag(parser, "--enqueue", _("queue explanation jobs for the questions created or changed"))
        set_option(
            parser, _("put every question of the file in this question set (created if new)")
        )
        parser.add_argument(
            "--deadline",
            type=local_moment,
            metavar="WHEN",
            help=_("with --set: when the set is needed by, e.g. '2026-12-02 07:00' (local time)"),
        )

    def handle(
        self,
        *args: Any,
        file: str,
        format: str | None,
        skip_invalid: bool,
        enqueue: bool,
        set_name: str | None,
        deadline: datetime | None,
        **options: Any,
    ) -> None:
        if deadline is not None and not set_name:
            raise CommandError(_("--deadline goes with --set"))
        if deadline is not None and deadline <= timezone.now():
            # Most likely a typo (last year, a.m. for p.m.); and a past deadline would put
            # the set's jobs first in the queue. Refused before anything is imported.
            raise CommandError(
                _(
                    "--deadline %(deadline)s is in the past (it is now %(now)s); nothing "
                    "imported. A deadline that has passed can be set on the set's admin page."
                )
                % {"deadline": times.shown(deadline), "now": times.shown(timezone.now())}
            )
        if set_name is not None:
            # Refused before the file is read: a name the set cannot have imports nothing.
            try:
                set_name = question_sets.clean_name(set_name)
            except question_sets.BadSetName as exc:
                raise CommandError(_("--set: %(reason)s") % {"reason": exc}) from None
        try:
            fmt = transfer.format_of(file, format)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        with _files.reading(file) as stream:
            parsed = transfer.parse(stream, fmt)
        if stream.encoding == _files.KOREAN_WINDOWS:
            self.stderr.write(
                _(
                    '%(file)s is not UTF-8: read as CP949 (Korean Windows, Excel\'s "CSV"); '
                    'save it as "CSV UTF-8" to leave nothing to guess'
                )
                % {"file": file}
            )
        for line, note in parsed.warnings:
            self.stderr.write(_("line %(line)s: %(reason)s") % {"line": line, "reason": note})
        if ignored := +parsed.ignored:
            what = ", ".join(f"{name} ({count})" for name, count in sorted(ignored.items()))
            self.stderr.write(_("read, not imported: %(what)s") % {"what": what})
        if parsed.errors and not skip_invalid:
            invalid = _(
                "%(invalid)s invalid row(s); nothing imported "
                "(--skip-invalid imports the %(valid)s valid ones):"
            )
            raise CommandError(_files.bad_rows(invalid, parsed.errors, len(parsed.rows)))
        if parsed.errors:
            skipped = _("skipped %(invalid)s invalid row(s):")
            self.stderr.write(_files.bad_rows(skipped, parsed.errors))
        if set_name and not parsed.rows:
            # Every row invalid (or none): an empty set would never be done; leave it be.
            self.stderr.write(
                _("no valid row: question set %(name)r not created or changed") % {"name": set_name}
            )
            set_name = None
        # The questions and their set land together, or not at all.
        with transaction.atomic(using=StudyQuestion.objects.all().db):
            progress = _files.progress(
                self.stderr, len(parsed.rows), _("imported %(done)s/%(total)s rows")
            )
            result = transfer.store(parsed.rows, progress)
            if set_name:
                question_set, added = question_sets.add(
                    set_name, result.created + result.updated + result.unchanged, deadline=deadline
                )
        if set_name:
            total = question_sets.questions(question_set).count()
            self.stdout.write(
                _("Question set %(name)r: %(added)s question(s) added, %(total)s in all.")
                % {"name": question_set.name, "added": added, "total": total}
            )
        queued = ""
        if parsed.skipped:
            kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(parsed.skipped.items()))
            queued = _("; skipped %(count)s question(s) of types not explained (%(kinds)s)") % {
                "count": parsed.skipped.total(),
                "kinds": kinds,
            }
        if enqueue:
            jobs = transfer.enqueue_explanations(result.created + result.updated)
            queued += _("; queued %(count)s explanation job(s)") % {"count": jobs.created}
            if jobs.audits:
                queued += _(" and %(count)s key audit job(s) to run before them") % {
                    "count": jobs.audits
                }
            if jobs.active_before:
                queued += _(", %(count)s already queued or running (they explain the new text)") % {
                    "count": jobs.active_before
                }
        self.stdout.write(
            _(
                "Imported %(rows)s row(s): %(created)s created, %(updated)s updated, "
                "%(unchanged)s unchanged%(queued)s."
            )
            % {
                "rows": len(parsed.rows),
                "created": len(result.created),
                "updated": len(result.updated),
                "unchanged": len(result.unchanged),
                "queued": queued,
            }
        )
