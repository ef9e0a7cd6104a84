"""The tutorial's commands, run as written in a sandbox of the checkout: ``make run``, the
import, the export of what the consumer wrote, the review, the export of the approved
explanations to a CSV file. What cannot run here is replaced, each for a stated reason:

- ``git clone`` and ``cd``: the test runs in the checkout itself;
- installing MLX and starting ``mlx_lm.server``: no model hub here, so the test LLM server
  stands in on the same port (every command's port 8080 becomes the sandbox's);
- the review is key presses in a browser: the test posts the page's own *Approve* form
  (``tests/test_admin_browser*.py`` press the keys in a real browser).

The Korean tutorial's commands are the English one's, character for character."""

from __future__ import annotations

import csv
import json
import re

import pytest

from tests.helpers import ROOT, wait_for
from tests.helpers.doc_shell import Block, Sandbox, code_blocks, sqlite_half_only

TUTORIAL = ROOT / "docs" / "tutorial.md"
KOREAN = ROOT / "docs" / "ko" / "tutorial.md"
NOT_HERE = ("git clone", "cd studyqueue", "python3 -m venv ~/mlx-venv", "~/mlx-venv/bin/pip")
# The review page's Approve form, posted as the browser posts it when `a` is pressed.
APPROVE_ALL = """
import html
import re
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
client = Client()
client.force_login(User.objects.get(username="me"))
approved = 0
page = client.get("/admin/studyqueue/explanationreview/").content.decode()
while "Nothing waits for review." not in page:
    form = re.search(r'<form[^>]*id="sq-approve-form">(.*?)</form>', page, re.S).group(1)
    fields = dict(re.findall(r'name="(revision|seen|back)" value="([^"]*)"', form))
    fields["decision"] = "approved"
    fields = {key: html.unescape(value) for key, value in fields.items()}
    response = client.post("/admin/studyqueue/explanationreview/decide/", fields, follow=True)
    page = response.content.decode()
    approved += 1
    assert approved <= 10, page
print("approved", approved)
"""


def steps(blocks: list[Block]) -> list[tuple[str, Block]]:
    """Each block with what the test does with it: skip, serve (the model server), start
    (``make run``) or run."""
    planned = []
    for block in blocks:
        first = block.text.strip().splitlines()[0]
        if first.startswith(NOT_HERE):
            planned.append(("skip", block))
        elif "mlx_lm.server" in first:
            planned.append(("serve", block))
        elif "make run" in first:
            planned.append(("start", block))
        else:
            planned.append(("run", block))
    return planned


def test_the_korean_tutorial_runs_the_same_commands():
    assert [b.text for b in code_blocks(KOREAN)] == [b.text for b in code_blocks(TUTORIAL)]


def test_every_skipped_command_is_one_the_test_cannot_run():
    """Only the clone, the MLX install and the model server are replaced; the rest runs."""
    planned = steps(code_blocks(TUTORIAL))
    skipped = [block.text for what, block in planned if what == "skip"]
    assert len(skipped) == 2, skipped  # the clone, the MLX install
    assert [what for what, _ in planned].count("serve") == 1
    assert [what for what, _ in planned].count("start") == 1


@pytest.mark.slow
@sqlite_half_only
def test_the_tutorial_runs_as_written(tmp_path):
    sandbox = Sandbox(tmp_path / "checkout")
    outputs: list[str] = []
    try:
        for what, block in steps(code_blocks(TUTORIAL)):
            if what == "serve":
                sandbox.start_llm_server()
            elif what == "start":
                log = sandbox.start(block.text, ready="Consumer ")
                assert "log in as 'me'" in log.read_text()
                assert "answers." in log.read_text(), "the model server answers"
            elif what == "run":
                if "exportexplanations --approved" in block.text:
                    # Step 6, in the browser: every explanation approved before the export.
                    wait_for(lambda: len(explained(sandbox)) == 3, timeout=60, what="3 jobs")
                    assert "approved 3" in sandbox.manage("shell", "-c", APPROVE_ALL)
                outputs.append(sandbox.run(block.text))
        said = "\n".join(outputs)
        assert "Imported 3 row(s): 3 created, 0 updated, 0 unchanged; queued 3 explanation " in said
        assert "job(s) and 3 key audit job(s) to run before them." in said
        assert "exported 3 question(s) to explanations.csv" in said
        with (sandbox.path / "explanations.csv").open(encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
        assert sorted(row["external_id"] for row in rows) == ["geo-1", "ko-1", "math-1"]
        assert {row["review_status"] for row in rows} == {"approved"}
        assert (sandbox.path / "explanations.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    finally:
        sandbox.close()


def explained(sandbox: Sandbox) -> list[dict]:
    out = sandbox.manage("exportexplanations")
    return [json.loads(line) for line in out.splitlines() if re.match(r"\{", line)]
