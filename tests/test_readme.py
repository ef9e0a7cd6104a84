"""The README is the front door: short, with the two quick-start commands, a first
explanation, and one click to every page of the manual and to the Korean guide. Its commands
run as written (``make run`` in a sandbox of the checkout, the first explanation against the
test LLM server). That it names only what exists is checked with the manual's pages
(``tests/docs/test_names.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_for
from tests.helpers.doc_shell import Sandbox, code_blocks, sqlite_half_only
from tests.llm_server import ANSWER

README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS = ROOT / "docs"
# The manual's changelog page includes CHANGELOG.md: the README links the file itself.
LINKED_AS = {"docs/changelog.md": "CHANGELOG.md"}


def manual_pages() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub (and the manual, ``myst_heading_anchors``) makes it."""
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def local_links(text: str) -> list[str]:
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:", link)]


def test_the_readme_is_a_front_door_not_a_manual():
    lines = TEXT.count("\n")
    assert lines <= 300, f"README.md has {lines} lines; the manual (docs/) is the place for more"


def test_every_local_link_of_the_readme_resolves():
    broken = []
    for link in local_links(TEXT):
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{link}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_every_page_of_the_manual_is_one_click_from_the_readme():
    linked = {link.partition("#")[0] for link in local_links(TEXT)}
    missing = [page for page in manual_pages() if LINKED_AS.get(page, page) not in linked]
    assert not missing, f"manual pages the README does not link: {', '.join(missing)}"


def test_the_readme_links_the_korean_guide():
    assert "docs/ko/index.md" in local_links(TEXT)


def test_the_quick_start_is_make_run_and_make_test():
    quick_start = code_blocks(README)[0].text
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines()]
    assert commands == ["make run", "make test"], quick_start
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


@pytest.mark.slow
@sqlite_half_only
def test_the_readme_commands_run_as_written(tmp_path):
    """``make run``, then the first explanation's commands in a second shell, then the
    export: the explanation of the test LLM server arrives, its correct key agreed with by
    the key audit and its reasoning by the blind verifier (no flag: a newcomer's first
    screen says it works). (``make test`` is the suite itself; ``tests/test_make.py`` runs it
    against a stand-in.)"""
    quick_start, first, export = code_blocks(README)[:3]
    (run_line,) = [line for line in quick_start.text.splitlines() if line.startswith("make run")]
    sandbox = Sandbox(tmp_path / "checkout")
    try:
        # The first time, make run asks for an operator account in the terminal.
        sandbox.env.update(DJANGO_SUPERUSER_USERNAME="me", DJANGO_SUPERUSER_PASSWORD="pw-123456")
        log = sandbox.start(run_line, ready="Consumer ")
        assert "Admin: http://127.0.0.1:" in log.read_text()

        out = sandbox.run(first.text)
        assert "Created 1 explanation job(s); 0 already queued." in out, out

        def exported() -> list[dict]:
            out = sandbox.run(export.text)  # and its count, "exported 1 question(s)"
            return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

        def verified() -> list[dict]:
            # The blind verifier runs after the explanation: its answer, or a flag of its own.
            rows = exported()
            checked = [r for r in rows if r["verifier_answer"] or verifier_flags(r)]
            return checked if len(checked) == len(rows) else []

        (row,) = wait_for(verified, timeout=30, what="the consumer's verified explanation")
        assert row["explanation"] == ANSWER and row["review_status"] == "unreviewed", row
        assert row["key_audit"] == "agrees" and row["key_audit_answer"] is None, row
        assert row["verifier_answer"] == 2 and not verifier_flags(row), row
        assert row["flags"] == [], row
    finally:
        sandbox.close()


def verifier_flags(row: dict) -> list[str]:
    return [flag for flag in row["flags"] if flag.startswith("verifier_")]
