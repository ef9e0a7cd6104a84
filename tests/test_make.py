"""``make test``: both halves run whatever the first one does, the target fails at the end
if either failed, and its last lines say which failed and whether PostgreSQL was skipped.
Run against a stand-in interpreter (no real test run inside the test run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")

# Answers pg_ready with $FAKE_PG_READY; a pytest run logs its DATABASE_URL ("" on SQLite)
# and ends with $FAKE_SQLITE_RC or $FAKE_PG_RC.
FAKE_PYTHON = """#!/bin/sh
if [ "$1 $2" = "-m tests.helpers.pg_ready" ]; then exit "$FAKE_PG_READY"; fi
if [ "$1 $2" = "-m pytest" ]; then
  echo "run:$DATABASE_URL" >> "$FAKE_LOG"
  if [ -z "$DATABASE_URL" ]; then exit "$FAKE_SQLITE_RC"; else exit "$FAKE_PG_RC"; fi
fi
exit 99
"""
PG = "postgres://postgres@127.0.0.1:5432/studyqueue"


def make_test(
    tmp_path: Path, *, sqlite: int, pg: int, pg_ready: bool, require_pg: bool = False
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    for stamp in (".installed", ".installed-dev"):  # newer than pyproject.toml: no install
        (venv / stamp).touch()
    log = tmp_path / "runs.log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STUDYQUEUE_", "MAKE"))}
    env.update(
        DATABASE_URL="",
        FAKE_LOG=str(log),
        FAKE_SQLITE_RC=str(sqlite),
        FAKE_PG_RC=str(pg),
        FAKE_PG_READY="0" if pg_ready else "1",
    )
    if require_pg:
        env["STUDYQUEUE_REQUIRE_PG"] = "1"
    done = subprocess.run(
        ["make", "--no-print-directory", "test", f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, log.read_text().splitlines()


def test_a_failing_sqlite_half_still_runs_postgresql_and_fails_at_the_end(tmp_path):
    done, runs = make_test(tmp_path, sqlite=1, pg=0, pg_ready=True)
    assert runs == ["run:", f"run:{PG}"]  # both halves ran
    assert done.returncode != 0
    last = done.stdout.strip().splitlines()[-2:]
    assert last == [
        "== make test: SQLite run FAILED; PostgreSQL run passed",
        "== make test FAILED: SQLite",
    ], done.stdout


def test_a_failing_postgresql_half_fails_the_target(tmp_path):
    done, runs = make_test(tmp_path, sqlite=0, pg=1, pg_ready=True)
    assert runs == ["run:", f"run:{PG}"] and done.returncode != 0
    assert done.stdout.strip().splitlines()[-1] == "== make test FAILED: PostgreSQL"


def test_both_failing_are_both_named(tmp_path):
    done, _ = make_test(tmp_path, sqlite=2, pg=1, pg_ready=True)
    assert done.returncode != 0
    assert done.stdout.strip().splitlines()[-1] == "== make test FAILED: SQLite, PostgreSQL"


def test_an_unreachable_postgresql_is_said_to_be_skipped(tmp_path):
    done, runs = make_test(tmp_path, sqlite=0, pg=0, pg_ready=False)
    assert runs == ["run:"] and done.returncode == 0, done.stdout + done.stderr
    assert "PostgreSQL run SKIPPED: not reachable" in done.stdout.strip().splitlines()[-1]


def test_an_unreachable_postgresql_fails_when_it_is_required(tmp_path):
    done, runs = make_test(tmp_path, sqlite=0, pg=0, pg_ready=False, require_pg=True)
    assert runs == ["run:"] and done.returncode != 0
    assert done.stdout.strip().splitlines()[-1] == (
        "== make test FAILED: PostgreSQL (not reachable)"
    )


def test_both_passing_pass(tmp_path):
    done, runs = make_test(tmp_path, sqlite=0, pg=0, pg_ready=True)
    assert runs == ["run:", f"run:{PG}"] and done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "== make test: SQLite run passed; PostgreSQL run passed"
    )


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python logs each command line and succeeds; its log."""
    venv, log = tmp_path / "logging-venv", tmp_path / "commands.log"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    python.chmod(0o755)
    for stamp in (".installed", ".installed-dev"):
        (venv / stamp).touch()
    return venv, log


def test_make_run_runs_the_system_checks_once(tmp_path):
    """serve runs them: the migration before it does not, or each warning is said twice."""
    venv, log = fake_venv(tmp_path)
    done = subprocess.run(
        ["make", "--no-print-directory", "run", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    migrate, serve = log.read_text().splitlines()
    assert migrate.startswith("manage.py migrate") and "--skip-checks" in migrate.split()
    assert serve == "manage.py serve"


def test_make_help_names_every_target_with_a_line():
    done = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    phony = makefile.split(".PHONY:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ").split()
    described = {line.split()[0]: line.split(None, 1)[1:] for line in done.stdout.splitlines()}
    assert sorted(described) == sorted(phony), done.stdout
    assert all(described.values()), done.stdout
