"""The test suite's settings: the project's, except that the project's template directory
is the suite's own (``tests/templates``), not the checkout's ``templates/``. A deployment
edits that one (the manual's docs/howto/prompt.md: the prompt, the admin's branding); the
suite renders, and versions, the templates studyqueue ships whatever it holds. And each
test process collects static files into a directory of its own (below)."""

from __future__ import annotations

import os
from pathlib import Path

from project.settings import *  # noqa: F403
from project.settings import BASE_DIR
from project.settings import TEMPLATES as PROJECT_TEMPLATES

SUITE_TEMPLATES = Path(__file__).resolve().parent / "templates"

TEMPLATES = [{**PROJECT_TEMPLATES[0], "DIRS": [SUITE_TEMPLATES]}]

# Each test process collects the static files (``serve`` runs collectstatic) into its own
# directory: WhiteNoise rewrites every .gz in place, which another pytest-xdist worker's web
# server may be serving. Helper processes inherit PYTEST_XDIST_WORKER, so share the test's.
STATIC_ROOT = BASE_DIR / ".test-static" / os.environ.get("PYTEST_XDIST_WORKER", "main")
