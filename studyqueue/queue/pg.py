"""Plain psycopg connections beside Django's (LISTEN, helpers, tests and benchmarks).

They connect with the parameters Django's own connections use: NAME, USER, PASSWORD, HOST,
PORT and every key of OPTIONS (``sslmode``, ``sslrootcert``, ``passfile``, ``service``,
``options``, ``application_name``…), which Django's PostgreSQL backend passes to psycopg.
So a TLS-only server or a service file works for them exactly as for the ORM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

# OPTIONS keys that Django's PostgreSQL backend handles itself (documented in Django's
# "PostgreSQL notes") and does not pass to psycopg, which would refuse them.
DJANGO_ONLY_OPTIONS = frozenset({"assume_role", "isolation_level", "pool", "server_side_binding"})
CONNECT_TIMEOUT_SECONDS = 5  # unless OPTIONS names its own connect_timeout


def psycopg_kwargs(settings_dict: Mapping[str, Any], *, dbname: str | None = None) -> dict:
    """``psycopg.connect()`` keyword arguments for a Django ``DATABASES`` entry (or
    ``dj_database_url.parse()`` output), built as Django builds its own: OPTIONS first,
    NAME before them, USER, PASSWORD, HOST and PORT over them; ``dbname`` overrides the
    database."""
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
    for key, setting in (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST")):
        if settings_dict.get(setting):
            params[key] = settings_dict[setting]
    if settings_dict.get("PORT"):
        params["port"] = settings_dict["PORT"]
    return params


def connect(
    settings_dict: Mapping[str, Any], *, dbname: str | None = None, **overrides: Any
) -> psycopg.Connection[Any]:
    """A new psycopg connection on Django's parameters for ``settings_dict`` (see
    ``psycopg_kwargs``); ``overrides`` (e.g. ``autocommit=True``) win over them."""
    params = {
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        **psycopg_kwargs(settings_dict, dbname=dbname),
        **overrides,
    }
    return psycopg.connect(**params)
