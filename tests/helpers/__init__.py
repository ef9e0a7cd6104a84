"""Test helpers: plain functions and classes the tests import (fixtures live in conftest.py).

``ROOT`` is the checkout; ``wait_for`` polls a condition up to a deadline (never a bare
sleep as synchronisation); ``database_url`` names the test database for a child process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent.parent


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def database_url(vendor: str, settings_dict: Mapping[str, Any]) -> str:
    """A ``DATABASE_URL`` for the database of a Django connection (``vendor`` and
    ``settings_dict``): how helper processes reach the database the test uses."""
    if vendor == "postgresql":
        return (
            f"postgres://{settings_dict['USER']}:{settings_dict['PASSWORD'] or ''}"
            f"@{settings_dict['HOST'] or '127.0.0.1'}:{settings_dict['PORT'] or 5432}"
            f"/{settings_dict['NAME']}"
        )
    return f"sqlite:///{settings_dict['NAME']}"


@dataclass
class Counters:
    """A job's counters as ``retry.decide`` reads them (``retry.Tally``), without a job."""

    attempts: int = 1
    max_attempts: int = 3
    free_releases: int = 0
    quality_retried: bool = False
