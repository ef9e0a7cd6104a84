"""The manual builds as ``make docs`` builds it, with no warning, and every page is in it."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = ROOT / "docs"


def sources() -> list[str]:
    return sorted(
        str(p.relative_to(DOCS).with_suffix(""))
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts
    )


def test_the_manual_builds_with_no_warning(manual):
    assert manual.returncode == 0, manual.output
    assert "WARNING" not in manual.output and "ERROR" not in manual.output, manual.output


def test_every_page_is_built_and_in_the_table_of_contents(manual):
    index = manual.page("index.html")
    missing = [page for page in sources() if not (manual.html / f"{page}.html").exists()]
    assert not missing, f"pages not built: {missing}"
    # Sphinx warns of a page in no toctree (-W makes it an error): every page is reachable.
    assert 'href="tutorial.html"' in index and 'href="ko/index.html"' in index


def test_make_docs_builds_the_manual_as_this_test_does():
    """The Makefile's target and CI run the same build (afresh, -W, -n)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (recipe,) = re.findall(r"^docs: .*\n\t(.*)$", makefile, re.M)
    for flag in ("-E", "-W", "--keep-going", "-n"):
        assert f" {flag} " in recipe, recipe
    assert "\nmake docs\n" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
