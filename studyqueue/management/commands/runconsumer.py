"""Run the study queue consumer: scheduled cycles that turn pending jobs into explanations."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.conf import SETTINGS
from studyqueue.consumer.consumer import Consumer
from studyqueue.consumer.scheduler import ERROR_RETRY_SECONDS, ScheduledConsumer
from studyqueue.management.commands._options import bounded_float, bounded_int, worker_id
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.management.commands._translated import TranslatedCommand

logger = logging.getLogger("studyqueue.consumer")

# The options take the same ranges as the settings they override.
INTERVAL, BATCH_SIZE = SETTINGS["INTERVAL_SECONDS"], SETTINGS["BATCH_SIZE"]


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Run the study queue consumer (blocking); --once or --drain to run and exit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help=_("run one cycle, then exit"))
        mode.add_argument(
            "--drain", action="store_true", help=_("run cycles until no job is ready, then exit")
        )
        parser.add_argument(
            "--interval",
            type=bounded_float(float(INTERVAL.high or 0)),
            help=_("seconds between cycles, at most a day (default: STUDYQUEUE INTERVAL_SECONDS)"),
        )
        parser.add_argument(
            "--batch-size",
            type=bounded_int(int(BATCH_SIZE.low or 1), int(BATCH_SIZE.high or 1)),
            help=_("jobs claimed per claim (default: STUDYQUEUE BATCH_SIZE)"),
        )
        parser.add_argument(
            "--worker-id",
            type=worker_id,
            help=_(
                "name of this consumer in logs and the admin; unique per process "
                "(default: host:pid)"
            ),
        )

    def handle(
        self,
        *args: Any,
        once: bool,
        drain: bool,
        interval: float | None,
        batch_size: int | None,
        worker_id: str | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        if (once or drain) and interval is not None:
            raise CommandError(
                _("--interval applies to the scheduler; it cannot go with --once/--drain")
            )
        with (
            Consumer(worker_id=worker_id, batch_size=batch_size, interval=interval) as consumer,
            stop_on_signals(consumer.request_stop),
        ):
            if once or drain:
                self._run_inline(consumer, drain=drain, verbosity=verbosity)
            else:
                ScheduledConsumer(consumer).run(
                    lambda line: self.stdout.write(line + " " + _("Ctrl-C to stop."))
                )

    def _run_inline(self, consumer: Consumer, *, drain: bool, verbosity: int) -> None:
        for cycles in itertools.count(1):
            try:
                result = consumer.run_cycle()
            except DatabaseError as exc:
                # The cycle closed the broken connection; the next one reconnects.
                logger.warning("study_consumer_cycle_failed error=%r", exc)
                if not drain or consumer.wait(ERROR_RETRY_SECONDS):
                    break
                continue
            if verbosity:
                # The summary is key=value pairs, as in the log: not translated.
                self.stdout.write(
                    _("cycle %(number)s: %(summary)s")
                    % {"number": cycles, "summary": result.summary()}
                )
            if not drain or consumer.stopping() or not result.more_ready:
                break
            if consumer.wait(consumer.pause_before_next_cycle()):
                break
