"""The wheel is the reusable app alone: studyqueue with its templates and migrations."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# ``pip wheel`` builds in the checkout (build/, *.egg-info): one build at a time, on one
# pytest-xdist worker with test_install's.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


def test_the_wheel_holds_the_app_with_its_templates_and_not_the_project(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("studyqueue-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[0] for name in names if not name.startswith("studyqueue-")}
    assert packages == {"studyqueue"}, packages
    for needed in (
        "studyqueue/templates/studyqueue/explanation_prompt.txt",
        "studyqueue/templates/studyqueue/explanation_system.txt",
        "studyqueue/templates/admin/studyqueue/dashboard.html",
        "studyqueue/templates/admin/studyqueue/studyquestionjob/change_list.html",
        "studyqueue/templates/admin/studyqueue/flag_badges.html",
        "studyqueue/templatetags/studyqueue_flags.py",
        "studyqueue/migrations/0001_squashed_0017_job_attempts.py",
        "studyqueue/management/commands/runconsumer.py",
    ):
        assert needed in names, needed
