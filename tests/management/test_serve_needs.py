"""What ``serve`` checks in a project's settings before it starts (``_serve_needs``)."""

from __future__ import annotations

import pytest
from django.db import connection

from studyqueue.management.commands import _serve_needs

pytestmark = pytest.mark.django_db


def test_the_standalone_project_has_everything():
    assert _serve_needs.missing() == []


def test_static_root_and_whitenoise_are_named(settings):
    settings.STATIC_ROOT = None
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != _serve_needs.WHITENOISE]
    gaps = _serve_needs.missing()
    assert gaps[0].startswith("STATIC_ROOT")
    assert gaps[1].startswith(_serve_needs.WHITENOISE)
    assert len(gaps) == 2


def test_sqlite_without_immediate_transactions_is_named(monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's options")
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "transaction_mode", "DEFERRED")
    assert _serve_needs.missing() == ['SQLite OPTIONS "transaction_mode": "IMMEDIATE"']


@pytest.mark.django_db(transaction=True)
def test_a_sqlite_file_not_in_wal_mode_is_named():
    """The journal mode lives in the file: the file is asked, not the settings."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's journal")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=DELETE")
    try:
        assert _serve_needs.missing() == [
            'SQLite OPTIONS "init_command": "PRAGMA journal_mode=WAL"'
        ]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
