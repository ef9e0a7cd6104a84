"""Settings: defaults, STUDYQUEUE dict, environment overrides and bad values."""

from __future__ import annotations

import pytest
from django.test import override_settings

from studyqueue.conf import SETTINGS, conf
from studyqueue.exceptions import SettingsError


def test_defaults(monkeypatch):
    for name in SETTINGS:
        monkeypatch.delenv(f"STUDYQUEUE_{name}", raising=False)
    assert conf.BATCH_SIZE == 1
    assert conf.STALE_MINUTES == 10
    assert conf.MAX_ATTEMPTS == 3
    assert conf.INTERVAL_SECONDS == 60
    assert conf.GATE_PERMITS == 1
    assert conf.LLM_URL == "http://127.0.0.1:8080/v1"


def test_environment_overrides_default_and_settings_override_environment(monkeypatch):
    monkeypatch.setenv("STUDYQUEUE_BATCH_SIZE", "4")
    monkeypatch.setenv("STUDYQUEUE_STALE_MINUTES", "2.5")
    assert conf.BATCH_SIZE == 4
    assert conf.STALE_MINUTES == 2.5
    with override_settings(STUDYQUEUE={"BATCH_SIZE": 7}):
        assert conf.BATCH_SIZE == 7


def test_bad_values_raise_a_clear_error_without_showing_secrets(monkeypatch):
    monkeypatch.setenv("STUDYQUEUE_BATCH_SIZE", "many")
    with pytest.raises(SettingsError, match="STUDYQUEUE_BATCH_SIZE must be an integer, got 'many'"):
        _ = conf.BATCH_SIZE
    monkeypatch.delenv("STUDYQUEUE_BATCH_SIZE")
    # A secret that does not parse is named, never shown.
    with (
        override_settings(STUDYQUEUE={"LLM_API_KEY": ["sk-secret"]}),
        pytest.raises(SettingsError) as raised,
    ):
        _ = conf.LLM_API_KEY
    assert str(raised.value) == "STUDYQUEUE['LLM_API_KEY'] must be text, got <hidden>"
    with override_settings(STUDYQUEUE={"LLM_URL": 8080}), pytest.raises(SettingsError) as raised:
        _ = conf.LLM_URL
    assert str(raised.value) == "STUDYQUEUE['LLM_URL'] must be text, got 8080"


def test_unknown_setting_is_an_attribute_error():
    with pytest.raises(AttributeError, match="unknown studyqueue setting 'NOPE'"):
        _ = conf.NOPE


def test_gate_permits_takes_a_number_or_auto(monkeypatch):
    from studyqueue.services.endpoints import first

    monkeypatch.setenv("STUDYQUEUE_GATE_PERMITS", " Auto ")
    assert conf.GATE_PERMITS == "auto" and first().auto
    assert first().slots == conf.GATE_MAX_PERMITS == 8
    monkeypatch.setenv("STUDYQUEUE_GATE_MAX_PERMITS", "3")
    assert first().slots == 3
    monkeypatch.setenv("STUDYQUEUE_GATE_PERMITS", "4")
    assert conf.GATE_PERMITS == 4 and not first().auto and first().slots == 4
    monkeypatch.setenv("STUDYQUEUE_GATE_PERMITS", "automatic")
    with pytest.raises(
        SettingsError,
        match="STUDYQUEUE_GATE_PERMITS must be an integer or 'auto', got 'automatic'",
    ):
        _ = conf.GATE_PERMITS
    with (
        override_settings(STUDYQUEUE={"GATE_MAX_PERMITS": "auto"}),
        pytest.raises(SettingsError, match=r"must be an integer, got 'auto'"),
    ):
        _ = conf.GATE_MAX_PERMITS


@pytest.mark.parametrize(
    ("raw", "value"),
    [("on", True), ("TRUE", True), ("1", True), ("yes", True), ("off", False), ("0", False),
     ("false", False), (" No ", False)],
)  # fmt: skip
def test_a_switch_reads_words_from_the_environment(monkeypatch, raw, value):
    monkeypatch.setenv("STUDYQUEUE_KEY_AUDIT_HOLDS", raw)
    assert conf.KEY_AUDIT_HOLDS is value


def test_a_switch_refuses_anything_else(monkeypatch):
    assert conf.KEY_AUDIT is True and conf.KEY_AUDIT_HOLDS is True  # the defaults
    monkeypatch.setenv("STUDYQUEUE_KEY_AUDIT", "maybe")
    with pytest.raises(SettingsError, match="STUDYQUEUE_KEY_AUDIT must be on or off"):
        _ = conf.KEY_AUDIT
    with override_settings(STUDYQUEUE={"KEY_AUDIT": 1}), pytest.raises(SettingsError):
        _ = conf.KEY_AUDIT
    with override_settings(STUDYQUEUE={"KEY_AUDIT": False}):
        assert conf.KEY_AUDIT is False
    with override_settings(STUDYQUEUE={"KEY_AUDIT_TEMPERATURE": 0}), pytest.raises(SettingsError):
        _ = conf.KEY_AUDIT_TEMPERATURE  # the samples must be able to differ
