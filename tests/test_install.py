"""The built wheel in a project made with ``django-admin startproject``: migrate, check, one
explanation against the test LLM server, the admin pages and the health endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.llm_server import ANSWER

pytestmark = [pytest.mark.slow]

SETTINGS_TAIL = """
INSTALLED_APPS += ["django_apscheduler", "studyqueue"]
STUDYQUEUE = {{"LLM_URL": "{url}", "INTERVAL_SECONDS": 60}}
"""
URLS_TAIL = """
from django.urls import include
urlpatterns += [path("studyqueue/", include("studyqueue.urls"))]
"""
ADMIN_SCRIPT = """
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
User.objects.create_superuser("op", "op@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="op"))
for url in ("/admin/", "/admin/studyqueue/studyquestionjob/", "/admin/studyqueue/studyquestion/",
            "/admin/studyqueue/queuedashboard/", "/admin/studyqueue/explanationrevision/",
            "/studyqueue/healthz"):
    assert client.get(url).status_code == 200, url
print("admin ok")
"""


def test_the_wheel_works_in_a_new_django_project(tmp_path, llm_server):
    python = sys.executable
    subprocess.run(
        [python, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"), ROOT],
        check=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "wheel").glob("studyqueue-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )
    project = tmp_path / "mysite"
    project.mkdir()
    subprocess.run(
        [python, "-m", "django", "startproject", "mysite", str(project)], check=True, timeout=60
    )
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write(SETTINGS_TAIL.format(url=llm_server.url))
    with (project / "mysite" / "urls.py").open("a") as urls:
        urls.write(URLS_TAIL)
    # The installed wheel, not this checkout, must provide the app: PYTHONPATH comes first.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_URL", "STUDYQUEUE_"))
    }
    env.update(PYTHONPATH=str(site), DJANGO_SETTINGS_MODULE="mysite.settings")

    def manage(*args: str) -> str:
        result = subprocess.run(
            [python, "manage.py", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
        return result.stdout

    where = manage("shell", "-c", "import studyqueue; print(studyqueue.__file__)")
    assert where.strip().splitlines()[-1].startswith(str(site)), where
    manage("migrate", "--noinput", "-v", "0")
    manage("check")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"text": "What is 2 + 2?", "external_id": "q1"}) + "\n")
    manage("importquestions", str(questions), "--enqueue")
    assert "completed=1" in manage("runconsumer", "--drain")
    (row,) = [json.loads(line) for line in manage("exportexplanations").splitlines()]
    assert (row["external_id"], row["explanation"]) == ("q1", ANSWER)
    assert "admin ok" in manage("shell", "-c", ADMIN_SCRIPT)
