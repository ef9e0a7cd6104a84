"""The manual built once per test session, as ``make docs`` builds it (every page read
afresh, warnings are errors, every reference checked), into a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT


@dataclass(frozen=True)
class Build:
    html: Path
    output: str  # what sphinx-build printed, warnings included
    returncode: int
    seconds: float

    def page(self, name: str) -> str:
        return (self.html / name).read_text(encoding="utf-8")


def sphinx_build(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "STUDYQUEUE_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-E",
            "-W",
            "--keep-going",
            "-n",
            "-q",
            "-b",
            "html",
            *extra,
            str(source),
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def manual(tmp_path_factory) -> Build:
    out = tmp_path_factory.mktemp("manual")
    started = time.monotonic()
    done = sphinx_build(ROOT / "docs", out)
    return Build(out, done.stdout + done.stderr, done.returncode, time.monotonic() - started)
