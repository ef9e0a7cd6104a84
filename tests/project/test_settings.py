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


@pytest.mark.parametrize(
    "value,threshold", [(None, 5), ("on", 5), ("1", 5), ("off", None), ("false", None)]
)
def test_prepared_statements_on_postgresql_can_be_turned_off(monkeypatch, value, threshold):
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    if value is None:
        monkeypatch.delenv("DATABASE_PREPARED_STATEMENTS", raising=False)
    else:
        monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", value)
    assert _database_config().get("OPTIONS", {}).get("prepare_threshold") == threshold


def test_a_bad_flag_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", PG_URL)
    monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", "maybe")
    with pytest.raises(
        ImproperlyConfigured, match="DATABASE_PREPARED_STATEMENTS must be on or off"
    ):
        _database_config()
