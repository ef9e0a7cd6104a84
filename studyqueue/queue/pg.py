"""Plain psycopg connections beside Django's (LISTEN, helpers, tests), made with Django's own
parameters (so TLS or a service file works for them as for the ORM), and how this process
reaches PostgreSQL: straight, or through a transaction pooler (docs/howto/postgresql.md,
"Connection poolers")."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import dj_database_url
import psycopg
from django.db import connections

from studyqueue.conf import conf
from studyqueue.exceptions import SettingsError

# OPTIONS keys that Django's PostgreSQL backend handles itself (documented in Django's
# "PostgreSQL notes") and does not pass to psycopg, which would refuse them.
DJANGO_ONLY_OPTIONS = frozenset({"assume_role", "isolation_level", "pool", "server_side_binding"})
CONNECT_TIMEOUT_SECONDS = 5  # unless OPTIONS names its own connect_timeout


def psycopg_kwargs(settings_dict: Mapping[str, Any], *, dbname: str | None = None) -> dict:
    """``psycopg.connect()`` arguments for a ``DATABASES`` entry, as Django builds its own."""
    options = {
        key: value
        for key, value in (settings_dict.get("OPTIONS") or {}).items()
        if key not in DJANGO_ONLY_OPTIONS
    }
    name = settings_dict.get("NAME")
    if dbname:
        params: dict[str, Any] = {**options, "dbname": dbname}
    elif name:
        params = {"dbname": name, **options}
    elif name is None:
        params = {"dbname": "postgres", **options}  # as Django: the default database
    else:
        params = options  # the database comes from OPTIONS (a service)
    for key in ("user", "password", "host", "port"):
        if settings_dict.get(key.upper()):
            params[key] = settings_dict[key.upper()]
    return params


def connect(settings_dict: Mapping[str, Any], **overrides: Any) -> psycopg.Connection[Any]:
    """A new psycopg connection for ``settings_dict``; ``overrides`` win over its parameters."""
    params = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, **psycopg_kwargs(settings_dict)}
    return psycopg.connect(**{**params, **overrides})


class Mode(enum.StrEnum):
    """How the queue keeps its sessions on a database (``mode``)."""

    NONE = "none"  # not PostgreSQL: one process per database, polling
    SESSION = "session"  # PostgreSQL reached straight: LISTEN
    DIRECT = "direct"  # behind a pooler, LISTEN on DIRECT_DATABASE_URL
    POOLED = "pooled"  # behind a pooler, no direct URL: polling


def mode(alias: str) -> Mode:
    """How the queue keeps its sessions on database ``alias`` (``DISABLE_SERVER_SIDE_CURSORS``:
    behind a transaction pooler, where LISTEN hears nothing)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":  # not ``sql.postgres``: this module needs no app
        return Mode.NONE
    if not connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return Mode.SESSION
    return Mode.DIRECT if conf.DIRECT_DATABASE_URL else Mode.POOLED


def direct_settings() -> dict[str, Any]:
    """``DIRECT_DATABASE_URL`` as a ``DATABASES`` entry; ``SettingsError`` never shows it."""
    url = conf.DIRECT_DATABASE_URL
    try:
        parsed = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise SettingsError(
            f"DIRECT_DATABASE_URL must look like postgres://user:pass@host:port/name "
            f"({type(exc).__name__})"
        ) from None
    if parsed.get("ENGINE") != "django.db.backends.postgresql":
        raise SettingsError("DIRECT_DATABASE_URL must be a postgres:// URL")
    return parsed


def session_settings(alias: str) -> Mapping[str, Any] | None:
    """The connection parameters of a real session on database ``alias``'s server: its own,
    ``DIRECT_DATABASE_URL``'s behind a pooler, or None (not PostgreSQL, or no direct URL)."""
    found = mode(alias)
    if found is Mode.SESSION:
        return connections[alias].settings_dict
    if found is Mode.DIRECT:
        return direct_settings()
    return None
