"""The project's database settings, read from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from project.settings import _database_config

PG_URL = "postgres://postgres@127.0.0.1:5432/studyqueue"
ROOT = Path(__file__).resolve().parents[2]


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


def _check(**env: str) -> subprocess.CompletedProcess:
    """``manage.py check`` in a fresh process with these environment variables."""
    environ = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    environ.update({"DATABASE_URL": "", **env})
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"STUDYQUEUE_ENV": "production", "DEBUG": "1", "SECRET_KEY": "x" * 50},
            "DEBUG must be off",
        ),
        ({"STUDYQUEUE_ENV": "production"}, "SECRET_KEY must be set in production"),
        ({"ALLOWED_HOSTS": "queue.example.com"}, "development SECRET_KEY serves only local"),
        ({"STUDYQUEUE_ENV": "staging"}, "STUDYQUEUE_ENV must be local or production"),
    ],
)
def test_unsafe_combinations_are_refused_at_startup(env, message):
    result = _check(**env)
    assert result.returncode != 0
    assert message in result.stderr


def test_production_with_its_own_key_and_hosts_starts():
    result = _check(
        STUDYQUEUE_ENV="production", SECRET_KEY="s" * 50, ALLOWED_HOSTS="queue.example.com"
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "env,message",
    [
        ({"CONN_MAX_AGE": "abc"}, "Error: CONN_MAX_AGE must be a whole number, got 'abc'"),
        ({"CONN_MAX_AGE": "1e12"}, "Error: CONN_MAX_AGE must be a whole number, got '1e12'"),
        ({"CONN_MAX_AGE": "-1"}, "Error: CONN_MAX_AGE must be from 0 to 86400, got -1"),
        ({"CONN_MAX_AGE": "99999999999"}, "Error: CONN_MAX_AGE must be from 0 to 86400"),
        ({"LOG_LEVEL": "LOUD"}, "Error: LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR"),
        ({"DEBUG": "maybe"}, "Error: DEBUG must be on or off, got 'maybe'"),
        ({"DATABASE_URL": "nonsense"}, "Error: DATABASE_URL must look like sqlite:///path"),
        ({"DATABASE_URL": "postgres://u:hunter22@h:port/db"}, "Error: DATABASE_URL must look"),
        ({"LANGUAGE_CODE": "fr"}, "Error: LANGUAGE_CODE must be one of en, ko, got 'fr'"),
        ({"TIME_ZONE": "Mars/Olympus"}, "Error: TIME_ZONE must be a time zone name such as"),
        ({"TIME_ZONE": "../etc/passwd"}, "Error: TIME_ZONE must be a time zone name such as"),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_the_variable(env, message):
    """Refused while the settings load: one line on stderr, no traceback, no secret."""
    result = _check(**env)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "hunter22" not in result.stderr


def test_log_level_is_case_insensitive():
    result = _check(LOG_LEVEL="debug", CONN_MAX_AGE="0")
    assert result.returncode == 0, result.stderr


def test_language_and_time_zone_come_from_the_environment():
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings; print(settings.LANGUAGE_CODE, settings.TIME_ZONE)",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": "", "LANGUAGE_CODE": "KO", "TIME_ZONE": "Asia/Seoul"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split()[-2:] == ["ko", "Asia/Seoul"], result.stderr
