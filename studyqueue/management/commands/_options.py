"""What the studyqueue commands share to read their arguments: a bad value is a one-line
error (``CommandError`` when called from code), never a traceback later on."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import datetime

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from studyqueue import times
from studyqueue.models import MAX_ID, StudyQuestionJob, StudyQuestionSet, width
from studyqueue.sets import question_sets


def _invalid(message: str, **values: object) -> argparse.ArgumentTypeError:
    """argparse's error for a bad value: ``message`` with its ``values`` filled in."""
    return argparse.ArgumentTypeError(message % values)


def _at_most(upper: object, value: object) -> argparse.ArgumentTypeError:
    return _invalid(_("must be at most %(upper)s, got %(value)s"), upper=upper, value=value)


def bounded_int(lower: int, upper: int) -> Callable[[str], int]:
    """A whole number in ``lower..upper``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise _invalid(_("expected a whole number, got %(value)r"), value=value) from None
        if number < lower:
            raise _invalid(
                _("must be at least %(lower)s, got %(value)s"), lower=lower, value=number
            )
        if number > upper:
            raise _at_most(upper, number)
        return number

    return parse


def bounded_float(upper: float) -> Callable[[str], float]:
    """A finite number greater than 0 and at most ``upper``."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise _invalid(_("expected a number, got %(value)r"), value=value) from None
        if not math.isfinite(number):
            raise _invalid(_("must be a finite number, got %(value)s"), value=value)
        if not number > 0:
            raise _invalid(_("must be greater than 0, got %(value)s"), value=value)
        if number > upper:
            raise _at_most(f"{upper:g}", value)
        return number

    return parse


object_id = bounded_int(1, MAX_ID)


def flag(parser: CommandParser, name: str, help: str) -> None:
    """``name``, an option that takes no value: ``True`` when given, else ``False``."""
    parser.add_argument(name, action="store_true", help=help)


def set_option(parser: CommandParser, help: str) -> None:
    """``--set NAME``, a question set's name, handed to ``handle`` as ``set_name``."""
    parser.add_argument("--set", dest="set_name", metavar="NAME", help=help)


def question_set(name: str) -> StudyQuestionSet:
    """The question set so named; a ``CommandError`` that says why when there is none."""
    try:
        return question_sets.get(name)
    except question_sets.SetNameError as exc:
        raise CommandError(str(exc)) from None


def worker_id(value: str) -> str:
    """A consumer's name: printable, not empty, fits its column."""
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError(_("must not be empty"))
    limit = width(StudyQuestionJob, "worker_id")
    if len(value) > limit:
        raise argparse.ArgumentTypeError(
            _("must be at most %(limit)s characters, got %(length)s")
            % {"limit": limit, "length": len(value)}
        )
    if not value.isprintable():
        raise argparse.ArgumentTypeError(_("must hold printable characters only"))
    return value


def local_moment(value: str) -> datetime:
    """A date and time such as ``2026-12-02 07:00``, in the local time zone (``TIME_ZONE``)
    unless it names its own; argparse's ``type``."""
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise _invalid(
            _("expected a date and time such as 2026-12-02 07:00, got %(value)r"), value=value
        )
    try:
        moment: datetime | None = (
            parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)
        )
    except OverflowError:  # year 1 in a zone east of UTC
        moment = None
    if moment is None or not times.in_range(moment):
        raise _invalid(
            _("%(value)r is out of range: too far in the past or the future"), value=value
        )
    return moment
