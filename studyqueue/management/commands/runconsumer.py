"""Run the studyqueue consumer (placeholder until the consumer lands)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand

from studyqueue import queue

logger = logging.getLogger("studyqueue.consumer")


class Command(BaseCommand):
    help = "Run one maintenance cycle of the study queue (the LLM consumer is not built yet)."

    def handle(self, *args: Any, **options: Any) -> None:
        result = queue.reset_stale()
        logger.info(
            "study_consumer_cycle stale_reset=%s stale_failed=%s", result.reset, result.failed
        )
        self.stdout.write(
            f"Cycle done: {result.reset} stale job(s) reset, {result.failed} failed. "
            "The LLM consumer is not implemented yet."
        )
