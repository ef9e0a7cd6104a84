"""Sphinx configuration of studyqueue's manual: MyST Markdown, the Furo theme, and the
reference pages generated from the code (``_ext/studyqueue_reference.py``).

Built by ``make docs`` (warnings are errors). The Korean guide (``ko/``) is part of the same
project."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE / "_ext")]

# The generated reference reads the commands and models through Django: the standalone
# project's settings, whatever the shell that builds the manual has set.
os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
import django  # noqa: E402

django.setup()

project = "studyqueue"
author = "the studyqueue authors"
copyright = "the studyqueue authors"
release = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
version = release

extensions = ["myst_parser", "studyqueue_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "screenshots"]
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links to a heading of another page
nitpicky = True
smartquotes = False  # "--dry-run" stays two hyphens, "'" a quote

html_theme = "furo"
html_title = f"studyqueue {release}"
html_show_sourcelink = False
