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
# A production deployment behind a proxy that ends TLS, as deploy/env.example has it.
PRODUCTION = {
    "STUDYQUEUE_ENV": "production",
    "SECRET_KEY": "k3J9-pQ2zX7wL0vB5nM8rT4yU6iO1aS2dF3gH4jK5lZ6xC7vB8nM9",
    "ALLOWED_HOSTS": "queue.example.com",
}
HTTPS = {
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO=https",
    "CSRF_TRUSTED_ORIGINS": "https://queue.example.com",
    "SECURE_SSL_REDIRECT": "on",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "on",
    "SECURE_HSTS_PRELOAD": "on",
}
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


def _check(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``manage.py check *args`` in a fresh process with these environment variables (and
    none of the project's own from the caller's environment)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", *HTTPS} and not k.startswith("DJANGO")
    }
    environ.update({"DATABASE_URL": "", **env})
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
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


def test_production_with_https_from_the_environment_passes_check_deploy():
    result = _check("--deploy", "--fail-level", "WARNING", **PRODUCTION, **HTTPS)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    assert not result.stderr


def test_without_them_check_deploy_names_each_https_setting():
    result = _check("--deploy", **PRODUCTION)
    assert result.returncode == 0, result.stderr  # warnings only
    for check in ("W004", "W008", "W012", "W016"):  # HSTS, redirect, both cookies
        assert f"security.{check}" in result.stderr


def test_the_cookies_follow_the_redirect_unless_set(monkeypatch):
    import importlib

    import project.settings

    for name in HTTPS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SECURE_SSL_REDIRECT", "on")
    monkeypatch.setenv("CSRF_COOKIE_SECURE", "off")
    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", "http_x_forwarded_proto = https")
    try:
        reloaded = importlib.reload(project.settings)
        assert reloaded.SESSION_COOKIE_SECURE is True
        assert reloaded.CSRF_COOKIE_SECURE is False
        assert reloaded.SECURE_PROXY_SSL_HEADER == ("HTTP_X_FORWARDED_PROTO", "https")
    finally:
        monkeypatch.undo()
        importlib.reload(project.settings)


@pytest.mark.parametrize(
    "env,message",
    [
        ({"SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https"}, "SECURE_PROXY_SSL_HEADER must"),
        ({"SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO="}, "SECURE_PROXY_SSL_HEADER must"),
        ({"CSRF_TRUSTED_ORIGINS": "queue.example.com"}, "CSRF_TRUSTED_ORIGINS must"),
        ({"SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS must be a whole number"),
        ({"SECURE_SSL_REDIRECT": "sure"}, "SECURE_SSL_REDIRECT must be on or off"),
    ],
)
def test_a_malformed_https_variable_is_one_clear_line(env, message):
    result = _check(**env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
