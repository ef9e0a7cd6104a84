"""No issue numbers in the product: the README, the changelog, the manual, the code, the
tests, the benchmarks and the build files name no issue of ours, as a word and a number or as
a bare hash and a number. History lives in CHANGELOG.md, told for users. A reference to
another project's tracker (``owner/repo#N``) is fine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCANNED = ["README.md", "CHANGELOG.md", "Makefile", "pyproject.toml", ".ci/run"]
FOLDERS = ["docs", "studyqueue", "tests", "bench", "project", "deploy", "templates"]
TEXT_FILES = {".md", ".py", ".txt", ".html", ".po", ".toml", ".cfg", ".service", ".example", ""}
PATTERNS = [
    # the word and a number (or a hyphen, a hash, a line end between them)
    re.compile(r"\b(?:issues?|tickets?|bugs?|PRs?|pull requests?)[\s-]+#?\d+", re.I),
    # a hash and a number in parentheses
    re.compile(r"\((?:see\s+)?#\d+\)", re.I),
    # a hash and a number after the words of a commit message (fixes, closes, refs, see)
    re.compile(r"\b(?:fix(?:e[sd])?|close[sd]?|resolve[sd]?|refs?|see)\s+#\d+", re.I),
    # a hash and a number opening a line, or a list item
    re.compile(r"^\s*(?:[-*]\s+)?#\d+\b", re.M),
]


def files() -> list[Path]:
    found = [ROOT / name for name in SCANNED]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_FILES and "_build" not in path.parts:
                found.append(path)
    return [path for path in found if "__pycache__" not in path.parts]


def issue_numbers(text: str) -> list[str]:
    return [match.group(0).strip() for pattern in PATTERNS for match in pattern.finditer(text)]


@pytest.mark.parametrize(
    "sample",
    [
        "Checked for issue" + " 17, kept.",
        "the templates since issue" + "\n18",
        "the pre-issue" + "-18 layout",
        "Issues" + " 16 to 18",
        "a fix (" + "#17)",
        "Fixes" + " #17",
        "- #" + "17: the gate",
    ],
)
def test_the_patterns_find_issue_numbers(sample):
    assert issue_numbers(sample), sample


@pytest.mark.parametrize(
    "sample",
    [
        "anyio no longer brings it (encode/httpcore#1103)",
        "Only the last attempts are shown, from #3 on.",
        "color: var(--body-quiet-color, #666);",
        "the issue's targets on the batching simulation",
        "# 3 retries, then failed",
    ],
)
def test_the_patterns_leave_other_numbers_alone(sample):
    assert not issue_numbers(sample), sample


def test_no_issue_numbers_anywhere():
    found = [
        f"{path.relative_to(ROOT)}: {number!r}"
        for path in files()
        for number in issue_numbers(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "issue numbers (history belongs in CHANGELOG.md, told for users):\n" + (
        "\n".join(found)
    )
