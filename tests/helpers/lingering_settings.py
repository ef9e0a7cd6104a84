"""The suite's settings, with ``tests.helpers.lingering_web`` as the WSGI application (the
serve test of a gunicorn that leaves a process holding its port)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

WSGI_APPLICATION = "tests.helpers.lingering_web.application"
