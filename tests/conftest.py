"""Shared fixtures: database vendor checks and helpers that reach a second connection."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres"):
        from django.conf import settings

        if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
            pytest.skip("PostgreSQL-only behaviour")


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def child_env() -> dict[str, str]:
    """Environment for helper processes: the same database the test uses."""
    env = dict(os.environ)
    settings_dict = connection.settings_dict
    if connection.vendor == "postgresql":
        env["DATABASE_URL"] = (
            f"postgres://{settings_dict['USER']}:{settings_dict['PASSWORD'] or ''}"
            f"@{settings_dict['HOST'] or '127.0.0.1'}:{settings_dict['PORT'] or 5432}"
            f"/{settings_dict['NAME']}"
        )
    else:
        env["DATABASE_URL"] = f"sqlite:///{settings_dict['NAME']}"
    env["PYTHONPATH"] = str(ROOT)
    env["DJANGO_SETTINGS_MODULE"] = "project.settings"
    env["LOG_LEVEL"] = "WARNING"
    return env


@pytest.fixture
def python() -> str:
    return sys.executable
