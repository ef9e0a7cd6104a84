"""Running the shell commands of the README and the manual as they are written there.

``code_blocks(path)`` reads a Markdown file's fenced blocks. A ``Sandbox`` is a directory
where those commands run literally: it links the checkout's files, and its ``.venv`` is this
interpreter (``bin/python`` runs it, and the install stamps are newer than ``pyproject.toml``,
so ``make run`` installs nothing). Each sandbox has its own SQLite database, its own port for
the web site and names the test LLM server's port as ``LLM_URL``; files the commands write
(``questions.jsonl``…) stay in it. Commands run in sessions of their own, so that what they
leave running in the background is stopped at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import ROOT, wait_for
from tests.helpers.ports import free_port

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
# The checkout's own state, never linked into a sandbox.
PRIVATE = {".git", "staticfiles", "artifacts"}


# The documented commands run on their SQLite default whatever database the suite uses: once,
# in the suite's SQLite half (the PostgreSQL half would run the very same thing again).
sqlite_half_only = pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="documented commands use the SQLite default: run in the suite's SQLite half",
)


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # where the block starts in its file


def code_blocks(path: Path, language: str | None = "sh") -> list[Block]:
    """The fenced code blocks of a Markdown file, in order (of one language, or all)."""
    text = path.read_text(encoding="utf-8")
    return [
        Block(m.group(1), m.group(2), text[: m.start()].count("\n") + 1)
        for m in FENCE.finditer(text)
        if language is None or m.group(1) == language
    ]


class Sandbox:
    """A directory where documented commands run as written (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        for entry in ROOT.iterdir():
            if entry.name not in PRIVATE and not entry.name.startswith((".venv", "db.sqlite3")):
                (path / entry.name).symlink_to(entry)
        bin_dir = path / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / "python").chmod(0o755)
        for stamp in (".installed", ".installed-dev", ".installed-docs"):
            (path / ".venv" / stamp).touch()
        self.llm_port = free_port()
        self.web_port = free_port()
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "DATABASE_URL", "STUDYQUEUE_", "MAKE"))
            and key not in {"LANGUAGE_CODE", "TIME_ZONE", "LOG_LEVEL", "PYTHONPATH"}
        }
        self.env.update(
            DATABASE_URL=f"sqlite:///{path / 'db.sqlite3'}",
            STUDYQUEUE_LLM_URL=f"http://127.0.0.1:{self.llm_port}/v1",
            STUDYQUEUE_BIND=f"127.0.0.1:{self.web_port}",
        )
        self.sessions: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def written(self, commands: str) -> str:
        """The commands with the documented ports replaced by this sandbox's."""
        return commands.replace(":8080", f":{self.llm_port}").replace(
            "--port 8080", f"--port {self.llm_port}"
        )

    def _session(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        """``argv`` in the sandbox, its output in ``log``, in a session of its own (``close``
        stops it)."""
        with log.open("w") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.path,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.sessions.append(proc)
        return proc

    def run(self, commands: str, timeout: float = 120) -> str:
        """Run commands to their end (bash, stopping at the first failure): their output.
        Whatever they start in the background runs on until ``close``."""
        log = self.path / f"run-{len(self.logs)}.log"
        self.logs.append(log)
        proc = self._session(["bash", "-e", "-o", "pipefail", "-c", self.written(commands)], log)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{commands!r} ran over {timeout}s:\n{log.read_text()}") from None
        output = log.read_text()
        assert proc.returncode == 0, f"{commands!r} failed ({proc.returncode}):\n{output}"
        return output

    def start(self, commands: str, ready: str, timeout: float = 90) -> Path:
        """Start long-running commands; return their log once it shows ``ready``."""
        log = self.path / f"start-{len(self.logs)}.log"
        self.logs.append(log)
        proc = self._session(["bash", "-c", self.written(commands)], log)

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{commands!r} ended ({proc.returncode}):\n{log.read_text()}")
            return ready in log.read_text()

        wait_for(up, timeout=timeout, what=f"{ready!r} from {commands!r}")
        return log

    def start_llm_server(self) -> Path:
        """The test LLM server on this sandbox's LLM port, standing in for a model server."""
        return self.start(
            f"exec .venv/bin/python -m tests.llm_server --port {self.llm_port}", "port="
        )

    def manage(self, *args: str) -> str:
        """``manage.py`` in this sandbox (for the test's own looks, not the documents')."""
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
        return result.stdout

    def close(self) -> None:
        """Stop every session the commands started (SIGTERM, then SIGKILL) and wait."""
        for proc in self.sessions:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    wait_for(lambda p=proc: _group_gone(p), timeout=30, what="the session")
                    break
                except AssertionError:
                    continue
            proc.wait(timeout=10)


def _group_gone(leader: subprocess.Popen) -> bool:
    leader.poll()  # reap the leader: a zombie would still count as a member
    try:
        os.killpg(leader.pid, 0)
    except ProcessLookupError:
        return True
    return False
