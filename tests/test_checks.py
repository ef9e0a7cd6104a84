"""One test per system check id."""

from __future__ import annotations

from django.test import override_settings

from studyqueue.checks import check_settings


def ids(**overrides) -> list[str]:
    with override_settings(STUDYQUEUE=overrides):
        return [m.id for m in check_settings()]


def test_defaults_are_clean():
    assert ids() == []


def test_e001_unparsable_value():
    assert ids(BATCH_SIZE="lots") == ["studyqueue.E001"]


def test_e002_out_of_range():
    assert ids(GATE_PERMITS=0, STALE_MINUTES=-1) == ["studyqueue.E002", "studyqueue.E002"]


def test_e003_llm_url_scheme():
    assert ids(LLM_URL="127.0.0.1:8080") == ["studyqueue.E003"]


def test_w001_llm_timeout_not_shorter_than_stale_threshold():
    assert ids(LLM_TIMEOUT_SECONDS=600, STALE_MINUTES=10) == ["studyqueue.W001"]


def test_w002_heartbeat_too_slow():
    assert ids(HEARTBEAT_SECONDS=400, STALE_MINUTES=10) == ["studyqueue.W002"]
