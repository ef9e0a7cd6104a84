"""The project's database settings, read from the environment."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from project.settings import _database_config

PG_URL = "postgres://postgres@127.0.0.1:5432/studyqueue"


def test_sqlite_is_the_default(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = _database_config()
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["CONN_HEALTH_CHECKS"] is True


def test_postgresql_uses_djangos_default_client_side_binding(monkeypatch):
    """No prepared statements: nothing for a pooler or a migration to invalidate."""
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    config = _database_config()
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert "prepare_threshold" not in config.get("OPTIONS", {})
    assert "server_side_binding" not in config.get("OPTIONS", {})


def test_a_bad_flag_is_a_clear_error(monkeypatch):
    from project.settings import _env_bool

    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DEBUG must be on or off"):
        _env_bool("DEBUG")
