"""The built wheel in a project made with ``django-admin startproject``, set up by following
the manual's "Install into an existing Django project" (docs/howto/install.md) literally: its
code blocks are appended as they stand. ``serve`` first names what a bare project lacks in one
line; then it runs the admin (styled: gunicorn serves its CSS through WhiteNoise) and the
consumer, which explains a question against the test LLM server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_for
from tests.helpers.doc_shell import code_blocks
from tests.helpers.processes import finish
from tests.llm_server import ANSWER

pytestmark = [pytest.mark.slow]

PAGE = ROOT / "docs" / "howto" / "install.md"
PAGE_LLM_URL = "http://127.0.0.1:8080/v1"
OPERATOR = {"DJANGO_SUPERUSER_USERNAME": "op", "DJANGO_SUPERUSER_PASSWORD": "pw"}
ADMIN_SCRIPT = """
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
client = Client()
client.force_login(User.objects.get(username="op"))
for url in ("/admin/", "/admin/studyqueue/studyquestionjob/", "/admin/studyqueue/studyquestion/",
            "/admin/studyqueue/queuedashboard/", "/admin/studyqueue/explanationrevision/",
            "/studyqueue/healthz"):
    assert client.get(url).status_code == 200, url
print("admin ok")
"""


def page_blocks() -> dict[str, str]:
    """The page's Python code blocks, by the file their first line names."""
    blocks = [block.text for block in code_blocks(PAGE, "python")]
    return {block.splitlines()[0].removeprefix("# "): block for block in blocks}


class Project:
    """A ``startproject`` project using the installed wheel (``PYTHONPATH`` first)."""

    def __init__(self, path: Path, site: Path) -> None:
        self.path = path
        path.mkdir()
        subprocess.run(
            [sys.executable, "-m", "django", "startproject", "mysite", str(path)],
            check=True,
            timeout=60,
        )
        self.settings = path / "mysite" / "settings.py"
        self.urls = path / "mysite" / "urls.py"
        self.pristine = {f: f.read_text() for f in (self.settings, self.urls)}
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "DATABASE_URL", "STUDYQUEUE_"))
        }
        self.env.update(PYTHONPATH=str(site), DJANGO_SETTINGS_MODULE="mysite.settings")

    def append(self, file: Path, text: str) -> None:
        """The file as startproject wrote it, then ``text``."""
        file.write_text(f"{self.pristine[file]}\n{text}")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def manage(self, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
        return result.stdout


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def test_the_install_page_makes_the_wheel_work_in_a_new_django_project(
    tmp_path, llm_server, free_port, studyqueue_wheel
):
    python = sys.executable
    site = tmp_path / "site"
    wheel = str(studyqueue_wheel)
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), wheel],
        check=True,
        timeout=300,
    )
    project = Project(tmp_path / "mysite", site)
    blocks = page_blocks()
    assert set(blocks) == {"settings.py", "urls.py"}, blocks

    # The apps alone: serve says in one line what else it needs, and starts nothing.
    project.append(project.settings, blocks["settings.py"].splitlines()[1])
    bare = project.run("serve", "--bind", f"127.0.0.1:{free_port}")
    assert bare.returncode != 0
    (line,) = bare.stderr.strip().splitlines()
    assert line.startswith("CommandError: serve needs in your settings: STATIC_ROOT"), line
    for named in ("WhiteNoiseMiddleware", "transaction_mode", "journal_mode=WAL"):
        assert named in line

    # Every step of the page, as written there.
    url = llm_server.url
    project.append(project.settings, blocks["settings.py"].replace(PAGE_LLM_URL, url))
    project.append(project.urls, blocks["urls.py"])
    where = project.manage("shell", "-c", "import studyqueue; print(studyqueue.__file__)")
    assert where.strip().splitlines()[-1].startswith(str(site)), where
    project.manage("migrate", "--noinput", "-v", "0")
    project.manage("check")
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        serve = subprocess.Popen(
            [python, "manage.py", "serve", "--bind", f"127.0.0.1:{free_port}"],
            cwd=project.path,
            env={**project.env, **OPERATOR},
            stdout=stdout,
            stderr=stderr,
        )
    try:
        wait_for(lambda: "Consumer " in out.read_text(), timeout=60, what="serve to start")
        questions = tmp_path / "q.jsonl"
        questions.write_text(json.dumps({"text": "What is 2 + 2?", "external_id": "q1"}) + "\n")
        project.manage("importquestions", str(questions), "--enqueue")
        rows = wait_for(
            lambda: [json.loads(r) for r in project.manage("exportexplanations").splitlines()],
            timeout=30,
            what="the running consumer's explanation",
        )
        assert [(row["external_id"], row["explanation"]) for row in rows] == [("q1", ANSWER)]

        site_url = f"http://127.0.0.1:{free_port}"
        status, _, login = get(f"{site_url}/admin/login/")
        assert status == 200
        (css,) = re.findall(r'href="(/static/admin/css/base\.css)"', login)
        status, content_type, body = get(f"{site_url}{css}")
        assert (status, content_type.split(";")[0]) == (200, "text/css")
        assert "body" in body, "the admin's stylesheet"
        assert "admin ok" in project.manage("shell", "-c", ADMIN_SCRIPT)
    finally:
        serve.send_signal(signal.SIGTERM)
        finish(serve)
    assert serve.returncode == 0, err.read_text()[-2000:]
    log = err.read_text()
    assert "study_job_completed" in log, "the page's LOGGING shows the consumer's lines"
    assert "database is locked" not in log and "Traceback" not in log, log[-2000:]
