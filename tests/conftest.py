"""Shared fixtures (helper functions and classes live in ``tests/helpers/``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import ROOT, database_url, ports

# Fixtures by which a test reaches a database: pytest-django's (``db``, ``transactional_db``,
# ``admin_user`` and the rest all request ``_django_db_helper``), and this suite's for helper
# processes, which reach the test database from outside.
DATABASE_FIXTURES = {"_django_db_helper", "child_env"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="deselect the tests that touch no database (make test runs those in its "
        "SQLite half only: they would pass or fail the same on PostgreSQL)",
    )


def uses_database(item: pytest.Item) -> bool:
    """Whether a test reaches the database: marked ``django_db`` or ``postgres``, or using
    a fixture that does. The others cannot: pytest-django refuses them any query."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("postgres"):
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("database_tests_only"):
        return
    kept = [item for item in items if uses_database(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not uses_database(item)])
        items[:] = kept


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres"):
        from django.conf import settings

        if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
            pytest.skip("PostgreSQL-only behaviour")


@pytest.fixture(scope="session", autouse=True)
def _static_root() -> None:
    """WhiteNoise serves STATIC_ROOT; in tests nothing has been collected there yet."""
    from django.conf import settings

    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def child_env() -> dict[str, str]:
    """Environment for helper processes: the same database the test uses."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(connection.vendor, connection.settings_dict)
    env["PYTHONPATH"] = str(ROOT)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"  # the suite's templates, not the checkout's
    env["LOG_LEVEL"] = "WARNING"
    return env


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def llm_server(settings):
    """A real chat-completions server on 127.0.0.1, wired into the STUDYQUEUE settings."""
    from tests.llm_server import LLMServer

    server = LLMServer().start()
    settings.STUDYQUEUE = {
        **getattr(settings, "STUDYQUEUE", {}),
        "LLM_URL": server.url,
        "LLM_TIMEOUT_SECONDS": 5,
        "BREAKER_BASE_SECONDS": 0.2,
    }
    yield server
    server.stop()


@pytest.fixture
def make_consumer():
    """Build ``Consumer`` objects from the settings in force (``make_consumer(**kwargs)``);
    each is closed at teardown, with its database connection."""
    from studyqueue.consumer.consumer import Consumer

    made = []

    def make(**kwargs):
        kwargs.setdefault("worker_id", "test")
        consumer = Consumer(**kwargs)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


@pytest.fixture
def free_port() -> int:
    """A port with nothing listening (connections are refused); see ``helpers.ports``."""
    return ports.free_port()


# What a copy of the checkout for a wheel build leaves out: git, virtualenvs, caches, what
# builds, runs and tests leave behind (see .gitignore).
NOT_SOURCE = (".git", ".venv*", ".*cache", ".hypothesis", ".test-*", "build", "*.egg-info")
NOT_SOURCE += ("staticfiles", "artifacts", "db.sqlite3*")


@pytest.fixture(scope="session")
def studyqueue_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel`` builds from the checkout, once per test process. Built from a
    copy: setuptools writes build/ and *.egg-info into the tree it builds, and two builds
    at once in one tree (two pytest-xdist workers, or two test runs) break each other."""
    import fnmatch
    import shutil
    import subprocess

    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == ROOT
        return [
            name
            for name in names
            if name == "__pycache__"
            or (top and any(fnmatch.fnmatch(name, pattern) for pattern in NOT_SOURCE))
        ]

    work = tmp_path_factory.mktemp("wheel")
    source = work / "studyqueue-source"
    shutil.copytree(ROOT, source, ignore=ignore, symlinks=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = work.glob("studyqueue-*.whl")
    return wheel


@pytest.fixture(autouse=True)
def _default_language() -> None:
    """Each test starts in the default language: a request with Accept-Language activates
    that language for the thread and nothing deactivates it, so a test would otherwise inherit
    Korean from whichever test ran before it in the same process (pytest-xdist orders them
    differently from run to run)."""
    from django.utils import translation

    translation.deactivate()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The default PBKDF2 hasher costs ~0.3 s per user created; tests need no strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def consumers(child_env, python, llm_server, tmp_path):
    """Start runconsumer processes; each is stopped (SIGKILL) at teardown if still alive.

    ``start(*args, log_level="INFO", **settings)`` passes ``settings`` as STUDYQUEUE_<NAME>
    variables; each process logs to its own file (``proc.log``).
    """
    import subprocess

    from tests.helpers.processes import start_consumer, stop_all

    procs: list[subprocess.Popen] = []

    def start(*args: str, log_level: str = "INFO", **settings: object) -> subprocess.Popen:
        env = {**child_env, "LOG_LEVEL": log_level, "STUDYQUEUE_LLM_URL": llm_server.url}
        log = tmp_path / f"consumer-{len(procs)}.log"
        procs.append(start_consumer(python, env, log, *args, **settings))
        return procs[-1]

    yield start
    stop_all(procs)
