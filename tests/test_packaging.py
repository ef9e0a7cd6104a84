"""The wheel is the reusable app alone: studyqueue with its templates and migrations."""

from __future__ import annotations

import zipfile

import pytest

pytestmark = pytest.mark.slow


def test_the_wheel_holds_the_app_with_its_templates_and_not_the_project(studyqueue_wheel):
    wheel = studyqueue_wheel
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
