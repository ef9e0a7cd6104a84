"""Plain psycopg connections beside Django's (LISTEN, helpers, tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def psycopg_kwargs(settings_dict: Mapping[str, Any], *, dbname: str | None = None) -> dict:
    """``psycopg.connect()`` keyword arguments for a Django ``DATABASES`` entry
    (or ``dj_database_url.parse()`` output); ``dbname`` overrides the database."""
    return {
        "dbname": dbname or settings_dict["NAME"],
        "user": settings_dict.get("USER") or None,
        "password": settings_dict.get("PASSWORD") or None,
        "host": settings_dict.get("HOST") or None,
        "port": settings_dict.get("PORT") or None,
    }
