"""Fixtures for the service tests."""

from __future__ import annotations

import pytest

from tests.llm_server import LLMServer


@pytest.fixture
def server():
    """A test LLM server of the tests' own, not wired into settings (see ``llm_server``)."""
    srv = LLMServer().start()
    yield srv
    srv.stop()
