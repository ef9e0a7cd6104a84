"""Django settings for studyqueue, read from the environment with safe local defaults.

Environment variables:
    DATABASE_URL      sqlite:///path or postgres://user:pass@host:port/name
                      (default: SQLite file db.sqlite3 beside manage.py)
    SECRET_KEY        required in production and for any non-local ALLOWED_HOSTS
    DEBUG             1/true/yes to enable (default: off; refused in production)
    STUDYQUEUE_ENV    local (default) or production
    ALLOWED_HOSTS     comma-separated (default: localhost,127.0.0.1)
    CONN_MAX_AGE      seconds to keep DB connections, 0..86400 (default: 600)
    LANGUAGE_CODE     en (default) or ko: the admin's language when the browser asks for
                      neither (the browser's Accept-Language wins)
    TIME_ZONE         the time zone of every time shown, e.g. Asia/Seoul (default: UTC)
    LOG_LEVEL         level of the studyqueue loggers: DEBUG, INFO, WARNING, ERROR or
                      CRITICAL (default: INFO)
    STUDYQUEUE_<NAME> any key of the STUDYQUEUE settings (see studyqueue/conf.py)

HTTPS behind a proxy (Django's settings of the same names; all off by default):
    SECURE_PROXY_SSL_HEADER         HTTP_X_FORWARDED_PROTO=https: the header the proxy sets
    CSRF_TRUSTED_ORIGINS            comma-separated, e.g. https://queue.example.com
    SECURE_SSL_REDIRECT             on: redirect http:// to https://
    SECURE_HSTS_SECONDS             0..63072000 (default: 0, no HSTS header)
    SECURE_HSTS_INCLUDE_SUBDOMAINS  on/off (default: off)
    SECURE_HSTS_PRELOAD             on/off (default: off)
    SESSION_COOKIE_SECURE           on/off (default: SECURE_SSL_REDIRECT)
    CSRF_COOKIE_SECURE              on/off (default: SECURE_SSL_REDIRECT)

A value that does not parse or is out of range is an ImproperlyConfigured error naming the
variable, raised while the settings load (manage.py prints it as one line).
"""

from __future__ import annotations

import os
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    """An on/off environment variable; anything unrecognised is a clear error."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be on or off, got {raw!r}")


def _env_int(name: str, default: int, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high``; anything else is a clear error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ImproperlyConfigured(f"{name} must be from {low} to {high}, got {value}")
    return value


def _env_choice(
    name: str, default: str, choices: tuple[str, ...], case: Callable[[str], str] = str.upper
) -> str:
    """One of ``choices``, written in any case (``case`` makes it the choices' own: log
    levels upper, language codes lower); anything else is a clear error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if case(raw) not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return case(raw)


def _env_time_zone(name: str, default: str) -> str:
    """An IANA time zone name such as Asia/Seoul; times on every page are shown in it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        zoneinfo.ZoneInfo(raw)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(
            f"{name} must be a time zone name such as Asia/Seoul or UTC, got {raw!r}"
        ) from None
    return raw


def _env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list; blanks between commas are ignored."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _proxy_ssl_header() -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` as Django takes it, from ``HTTP_<HEADER>=<value>``."""
    raw = os.environ.get("SECURE_PROXY_SSL_HEADER", "").strip()
    if not raw:
        return None
    header, _, value = raw.partition("=")
    header, value = header.strip().upper(), value.strip()
    if not (header.startswith("HTTP_") and header[5:].replace("_", "").isalnum() and value):
        raise ImproperlyConfigured(
            "SECURE_PROXY_SSL_HEADER must look like HTTP_X_FORWARDED_PROTO=https "
            f"(the request header as Django names it, then the value meaning HTTPS), got {raw!r}"
        )
    return header, value


def _trusted_origins() -> list[str]:
    origins = _env_list("CSRF_TRUSTED_ORIGINS")
    for origin in origins:
        if not origin.startswith(("https://", "http://")):
            raise ImproperlyConfigured(
                "CSRF_TRUSTED_ORIGINS must be comma-separated origins with their scheme, "
                f"e.g. https://queue.example.com, got {origin!r}"
            )
    return origins


DEBUG = _env_bool("DEBUG")
STUDYQUEUE_ENV = os.environ.get("STUDYQUEUE_ENV", "local").strip().lower()
if STUDYQUEUE_ENV not in {"local", "production"}:
    raise ImproperlyConfigured(
        f"STUDYQUEUE_ENV must be local or production, got {STUDYQUEUE_ENV!r}"
    )
PRODUCTION = STUDYQUEUE_ENV == "production"
if PRODUCTION and DEBUG:
    # DEBUG pages show settings, SQL and tracebacks to anyone who triggers an error.
    raise ImproperlyConfigured("DEBUG must be off in production (STUDYQUEUE_ENV=production)")

ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1")
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}

# A local-only key: fine on a developer's machine, refused wherever others could reach
# the site (sessions and password resets signed with a published key are forgeable).
DEVELOPMENT_SECRET_KEY = "studyqueue-insecure-local-key-change-me"
SECRET_KEY = os.environ.get("SECRET_KEY", "") or DEVELOPMENT_SECRET_KEY
if SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set in production (STUDYQUEUE_ENV=production)"
        )
    if not set(ALLOWED_HOSTS) <= LOCAL_HOSTS:
        raise ImproperlyConfigured(
            "the built-in development SECRET_KEY serves only local hosts; set SECRET_KEY "
            "to serve ALLOWED_HOSTS beyond localhost"
        )

# HTTPS: set where the site is served, so never by editing the checkout. Behind a proxy that
# ends TLS, SECURE_SSL_REDIRECT needs SECURE_PROXY_SSL_HEADER, or every request looks like
# http:// and redirects forever; hence nothing here is on by default.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header()
CSRF_TRUSTED_ORIGINS = _trusted_origins()
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = _env_int("SECURE_HSTS_SECONDS", 0, 0, 2 * 365 * 86400)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD")
# An HTTPS-only site wants cookies that never travel over http://.
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", SECURE_SSL_REDIRECT)

INSTALLED_APPS = [
    # First: of two apps' catalogues carrying one msgid, the earlier app's wins, and ours
    # corrects some of the admin's Korean ("Select %s to view"). Nothing else here depends
    # on the order (no template, static file or command of the same name).
    "studyqueue",
    # django.contrib.admin, its site branded studyqueue and its app list for operators.
    "studyqueue.adminsite.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_apscheduler",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS and JS) from STATIC_ROOT, whatever DEBUG says.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin in the browser's language (Accept-Language), among LANGUAGES.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's overrides, found before the apps' own templates: the prompt
        # templates and the admin's branding (docs/howto/prompt.md, "Override other templates").
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"


def _database_config() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
    # Persistent, health-checked connections: the consumer is long-running and a
    # restarted database must not break every later cycle.
    conn_max_age = _env_int("CONN_MAX_AGE", 600, 0, 86400)
    try:
        parsed = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    except ValueError as exc:
        # Never the URL itself: it may hold a password.
        raise ImproperlyConfigured(
            "DATABASE_URL must look like sqlite:///path or postgres://user:pass@host:port/name "
            f"({type(exc).__name__})"
        ) from None
    config: dict[str, Any] = dict(parsed)
    pooling = _env_choice("DATABASE_POOLING", "session", ("session", "transaction"), str.lower)
    if pooling == "transaction":
        # Behind PgBouncer in transaction mode (Django's "Transaction pooling and server-side
        # cursors"). Django's default client-side binding prepares no statement that would
        # have to outlive its transaction. studyqueue reads this setting to keep LISTEN's
        # session off the pooler (DIRECT_DATABASE_URL) or poll instead.
        config["DISABLE_SERVER_SIDE_CURSORS"] = True
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = {
            # Writers queue up instead of failing with "database is locked".
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # A file, not :memory:, so that test threads and helper processes share it.
        config["TEST"] = {"NAME": str(BASE_DIR / ".test-db.sqlite3")}
    return config


DATABASES = {"default": _database_config()}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGES = [("en", _("English")), ("ko", _("Korean"))]
LANGUAGE_CODE = _env_choice(
    "LANGUAGE_CODE", "en", tuple(code for code, _name in LANGUAGES), case=str.lower
)
TIME_ZONE = _env_time_zone("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
# Dates and times with seconds, in every language (studyqueue/formats/<lang>/formats.py).
FORMAT_MODULE_PATH = ["studyqueue.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed copies next to each file; served with far-future caching only for
    # hashed names, so no manifest is needed and pages render before collectstatic too.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# django-apscheduler shows times in the admin with this format.
APSCHEDULER_DATETIME_FORMAT = "N j, Y, f:s a"
APSCHEDULER_RUN_NOW_TIMEOUT = 25

STUDYQUEUE: dict = {}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "kv": {"format": "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "kv"},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # Propagates to the root handler (and so to pytest's caplog).
        "studyqueue": {
            "level": _env_choice(
                "LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
            )
        },
        "apscheduler": {"level": "WARNING"},
    },
}
