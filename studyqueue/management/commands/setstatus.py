"""How far a question set is: its explanations by state, when it will be done and whether it
makes its deadline; ``--watch`` draws a progress bar until it is done."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from tqdm import tqdm

from studyqueue.management.commands._options import bounded_int, question_set
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import StudyQuestionSet
from studyqueue.sets import question_sets
from studyqueue.times import short_duration


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
            help=_(
                "draw a progress bar (a line per change off a terminal) until it is done or empty"
            ),
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
        named = question_set(name)
        if watch:
            self._watch(named, interval, as_json=json)
            return
        progress = question_sets.progress(named)
        self.stdout.write(
            _dumps(progress) if json else "\n".join(question_sets.status_lines(progress))
        )

    def _watch(self, watched: StudyQuestionSet, interval: int, *, as_json: bool) -> None:
        """Look every ``interval`` seconds until the set is done or empty (Ctrl-C stops)."""
        progress = question_sets.progress(watched)
        bar = None
        if not as_json and self.stdout.isatty():
            bar = tqdm(total=progress.total, unit="q", file=sys.stdout, desc=progress.name)
        last = None
        try:
            while True:
                finished = progress.explained + progress.failed
                # The checks count too: a set whose explanations all ended may still be
                # checking, and the last line printed must be the one that says it is done.
                seen = (finished, progress.total, progress.checking, progress.done)
                if bar is not None:
                    bar.total = progress.total
                    bar.n = finished
                    bar.set_postfix_str(_eta_text(progress), refresh=False)
                    bar.refresh()
                elif seen != last:
                    self.stdout.write(
                        _dumps(progress) if as_json else question_sets.counts_line(progress)
                    )
                    last = seen
                if progress.done or progress.empty:
                    # An empty set never becomes done: waiting on it would never end.
                    break
                time.sleep(interval)
                progress = question_sets.progress(watched)
        except KeyboardInterrupt:
            pass
        finally:
            if bar is not None:
                bar.close()
        if not as_json:
            self.stdout.write("\n".join(question_sets.status_lines(progress)))


def _dumps(progress: question_sets.Progress) -> str:
    return json.dumps(progress.as_json(), ensure_ascii=False)


def _eta_text(progress: question_sets.Progress) -> str:
    if progress.empty:
        return _("empty")
    if progress.done:
        return _("done")
    if not progress.waiting and progress.checking:
        return _("checks running")
    if progress.eta_seconds is None:
        return _("no rate yet")
    return _("about %(left)s left") % {
        "left": short_duration(timedelta(seconds=progress.eta_seconds))
    }
