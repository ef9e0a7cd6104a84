"""How far a question set is: its explanations by state, when it will be done and whether it
makes its deadline; ``--watch`` draws a progress bar until it is done."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from tqdm import tqdm

from studyqueue.explanations import question_sets
from studyqueue.explanations.question_sets import Progress
from studyqueue.management.commands._options import bounded_int
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import StudyQuestionSet
from studyqueue.times import short_duration, shown


class Command(TranslatedCommand):
    help = gettext_lazy(
        "How far a question set is: explained, approved, flagged, failed and waiting, when it "
        "will be done at the current rate, and whether it makes its deadline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help=_("the question set's name"))
        parser.add_argument("--json", action="store_true", help=_("one JSON object"))
        parser.add_argument(
            "--watch",
            action="store_true",
            help=_("draw a progress bar (a line per change off a terminal) until it is done"),
        )
        parser.add_argument(
            "--interval",
            type=bounded_int(1, 3600),
            default=2,
            help=_("with --watch: seconds between two looks (default: %(default)s)"),
        )

    def handle(
        self, *args: Any, name: str, json: bool, watch: bool, interval: int, **options: Any
    ) -> None:
        try:
            question_set = question_sets.get(name)
        except question_sets.SetNotFound as exc:
            raise CommandError(str(exc)) from None
        if watch:
            self._watch(question_set, interval, as_json=json)
            return
        progress = question_sets.progress(question_set)
        self.stdout.write(_dumps(progress) if json else "\n".join(lines(progress)))

    def _watch(self, question_set: StudyQuestionSet, interval: int, *, as_json: bool) -> None:
        """Look every ``interval`` seconds until the set is done (Ctrl-C stops)."""
        progress = question_sets.progress(question_set)
        bar = None
        if not as_json and self.stdout.isatty():
            bar = tqdm(total=progress.total, unit="q", file=sys.stdout, desc=progress.name)
        last = None
        try:
            while True:
                finished = progress.explained + progress.failed
                if bar is not None:
                    bar.total = progress.total
                    bar.n = finished
                    bar.set_postfix_str(_eta_text(progress), refresh=False)
                    bar.refresh()
                elif (finished, progress.total) != last:
                    self.stdout.write(_dumps(progress) if as_json else lines(progress)[0])
                    last = (finished, progress.total)
                if progress.done:
                    break
                time.sleep(interval)
                progress = question_sets.progress(question_set)
        except KeyboardInterrupt:
            pass
        finally:
            if bar is not None:
                bar.close()
        if not as_json:
            self.stdout.write("\n".join(lines(progress)))


def _dumps(progress: Progress) -> str:
    return json.dumps(progress.as_json(), ensure_ascii=False)


def _eta_text(progress: Progress) -> str:
    if progress.done:
        return _("done")
    if progress.eta_seconds is None:
        return _("no rate yet")
    return _("about %(left)s left") % {
        "left": short_duration(_seconds(progress.eta_seconds)),
    }


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def lines(progress: Progress) -> list[str]:
    """The set's status as people read it: counts, then timing, then the deadline."""
    out = [question_sets.counts_line(progress)]
    started = (
        _("started %(at)s") % {"at": shown(progress.started_at)}
        if progress.started_at
        else _("not started yet")
    )
    if progress.done:
        out.append(
            _("%(started)s; done %(finished)s")
            % {"started": started, "finished": shown(progress.finished_at)}
        )
    elif progress.eta_seconds is None or progress.rate is None:
        out.append(
            _("%(started)s; no estimate yet: no explanation completed in the last 10 min")
            % {"started": started}
        )
    else:
        out.append(
            _("%(started)s; finishes about %(at)s (in %(left)s), %(basis)s")
            % {
                "started": started,
                "at": shown(progress.finishes_at),
                "left": short_duration(_seconds(progress.eta_seconds)),
                "basis": progress.rate.basis,
            }
        )
    if progress.deadline is not None:
        late = progress.late_by
        if progress.done:
            made = progress.finished_at is not None and progress.finished_at <= progress.deadline
            verdict = _("made it") if made else _("finished after it")
        elif late is not None:
            verdict = _("about %(late)s late at the current rate") % {"late": short_duration(late)}
        elif progress.eta_seconds is None:
            verdict = _("no estimate yet")
        else:
            verdict = _("in time at the current rate")
        out.append(
            _("deadline %(deadline)s: %(verdict)s")
            % {"deadline": shown(progress.deadline), "verdict": verdict}
        )
    return out
