"""How far a question set is: its explanations by state, when it will be done and whether it
makes its deadline (``watch manage.py setstatus NAME`` follows it)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.management.commands._options import question_set
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.sets import question_sets


class Command(TranslatedCommand):
    help = gettext_lazy(
        "How far a question set is: explained, approved, flagged, failed and waiting, when it "
        "will be done at the current rate, and whether it makes its deadline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help=_("the question set's name"))
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help=_("one JSON object")
        )

    def handle(self, *args: Any, name: str, as_json: bool, **options: Any) -> None:
        progress = question_sets.progress(question_set(name))
        if as_json:
            self.stdout.write(json.dumps(progress.as_json(), ensure_ascii=False))
        else:
            self.stdout.write("\n".join(question_sets.status_lines(progress)))
