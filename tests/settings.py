"""The test suite's settings: the project's, except that the project's template directory
is the suite's own (``tests/templates``), not the checkout's ``templates/``. A deployment
edits that one (the manual's docs/howto/prompt.md: the prompt, the admin's branding); the
suite renders, and versions, the templates studyqueue ships whatever it holds."""

from __future__ import annotations

from pathlib import Path

from project.settings import *  # noqa: F403
from project.settings import TEMPLATES as PROJECT_TEMPLATES

SUITE_TEMPLATES = Path(__file__).resolve().parent / "templates"

TEMPLATES = [{**PROJECT_TEMPLATES[0], "DIRS": [SUITE_TEMPLATES]}]
