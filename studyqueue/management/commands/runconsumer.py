"""Run the study queue consumer: scheduled cycles that turn pending jobs into explanations."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from studyqueue.conf import conf
from studyqueue.consumer import default_worker_id
from studyqueue.management.commands._options import non_empty, positive_float, positive_int
from studyqueue.scheduler import (
    ERROR_RETRY_SECONDS,
    ConsumerRuntime,
    build_scheduler,
    consume_job,
    listen_for_jobs,
    set_runtime,
)

logger = logging.getLogger("studyqueue.consumer")


class Command(BaseCommand):
    help = "Run the study queue consumer (blocking); --once or --drain to run and exit."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="run one cycle, then exit")
        mode.add_argument(
            "--drain", action="store_true", help="run cycles until no job is ready, then exit"
        )
        parser.add_argument(
            "--interval",
            type=positive_float,
            default=None,
            help="seconds between cycles (default: STUDYQUEUE INTERVAL_SECONDS)",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=None,
            help="jobs claimed per claim (default: STUDYQUEUE BATCH_SIZE)",
        )
        parser.add_argument(
            "--worker-id",
            type=non_empty,
            default=None,
            help="name of this consumer in logs and the admin; unique per process "
            "(default: host:pid)",
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
                "--interval applies to the scheduler; it cannot go with --once/--drain"
            )
        runtime = ConsumerRuntime(
            worker_id=worker_id or default_worker_id(),
            batch_size=batch_size,
            interval=interval or conf.INTERVAL_SECONDS,
        )
        set_runtime(runtime)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if once or drain:
                self._run_inline(runtime, drain=drain, verbosity=verbosity)
            else:
                self._run_scheduler(runtime)
        finally:
            set_runtime(None)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _install_signals(self, on_stop: Any) -> None:
        def handler(signum: int, frame: Any) -> None:
            logger.warning("study_consumer_stopping signal=%s", signal.Signals(signum).name)
            on_stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _run_inline(self, runtime: ConsumerRuntime, *, drain: bool, verbosity: int) -> None:
        self._install_signals(runtime.stop.set)
        cycles = 0
        while True:
            try:
                result = consume_job()
            except DatabaseError as exc:
                # consume_job closed the broken connection; the next cycle reconnects.
                logger.warning("study_consumer_cycle_failed error=%r", exc)
                cycles += 1
                if runtime.stop.wait(ERROR_RETRY_SECONDS) or not drain:
                    break
                continue
            cycles += 1
            if verbosity:
                self.stdout.write(f"cycle {cycles}: {result.summary()}")
            if not drain or runtime.stop.is_set() or not result.more_ready:
                break

    def _run_scheduler(self, runtime: ConsumerRuntime) -> None:
        scheduler = build_scheduler(runtime)
        stopper: list[threading.Thread] = []

        def stop() -> None:
            if runtime.stop.is_set():
                return
            runtime.stop.set()
            # shutdown(wait=True) blocks until the running cycle ends; the signal handler
            # must return at once, so it runs on a helper thread.
            thread = threading.Thread(target=scheduler.shutdown, kwargs={"wait": True})
            thread.start()
            stopper.append(thread)

        self._install_signals(stop)
        listen_for_jobs(runtime)
        logger.info(
            "study_consumer_started worker=%s interval_s=%s gate_permits=%s llm_url=%s",
            runtime.worker_id,
            runtime.interval,
            conf.GATE_PERMITS,
            conf.LLM_URL,
        )
        self.stdout.write(
            f"Consumer {runtime.worker_id} running every {runtime.interval:g}s "
            f"against {conf.LLM_URL}. Ctrl-C to stop."
        )
        scheduler.start()
        for thread in stopper:
            thread.join()
        logger.info("study_consumer_stopped worker=%s", runtime.worker_id)
