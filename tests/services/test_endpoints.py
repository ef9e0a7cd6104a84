"""The endpoint pool as the settings name it (``services/endpoints.py``): ``LLM_URL`` with
commas, ``LLM_ENDPOINTS`` in the settings or the environment, and the errors of a malformed
one (also as the system check E009)."""

from __future__ import annotations

import json

import pytest

from studyqueue.checks import check_settings
from studyqueue.exceptions import SettingsError
from studyqueue.services.endpoints import Endpoint, configured, shown_urls


def test_one_url_is_one_endpoint_with_the_global_settings(settings):
    settings.STUDYQUEUE = {
        "LLM_URL": "http://127.0.0.1:8080/v1",
        "LLM_MODEL": "m",
        "GATE_PERMITS": 2,
    }
    assert configured() == [Endpoint("http://127.0.0.1:8080/v1", "m", "", 2, 8)]


def test_commas_in_llm_url_name_several_servers_sharing_the_settings(settings):
    settings.STUDYQUEUE = {
        "LLM_URL": " http://a:1/v1 , http://u:pw@b:2/v1/",
        "LLM_API_KEY": "k3y",
        "GATE_PERMITS": "auto",
        "GATE_MAX_PERMITS": 4,
    }
    pool = configured()
    assert [e.url for e in pool] == ["http://a:1/v1", "http://u:pw@b:2/v1/"]
    assert all(e.api_key == "k3y" and e.auto and e.slots == 4 for e in pool)
    assert [e.name for e in pool] == ["http://a:1/v1", "http://b:2/v1"]
    # What a consumer records and logs: no credentials.
    assert shown_urls() == "http://a:1/v1,http://[redacted]@b:2/v1/"


def test_llm_endpoints_gives_each_server_its_own_model_key_and_gate(settings):
    settings.STUDYQUEUE = {
        "LLM_URL": "http://ignored:9/v1",
        "GATE_MAX_PERMITS": 6,
        "LLM_ENDPOINTS": [
            {"url": "http://mac:8080/v1", "model": "qwen-7b", "gate_permits": 2},
            {"url": "http://gpu:8000/v1", "api_key": "s3cret", "gate_permits": "auto"},
        ],
    }
    mac, gpu = configured()
    assert (mac.model, mac.permits, mac.slots) == ("qwen-7b", 2, 2)
    assert (gpu.api_key, gpu.auto, gpu.slots) == ("s3cret", True, 6)


def test_llm_endpoints_from_the_environment_is_json(settings, monkeypatch):
    settings.STUDYQUEUE = {}
    monkeypatch.setenv(
        "STUDYQUEUE_LLM_ENDPOINTS",
        json.dumps([{"url": "http://a:1/v1"}, {"url": "http://b:1/v1", "gate_max_permits": 3}]),
    )
    assert [(e.name, e.max_permits) for e in configured()] == [
        ("http://a:1/v1", 8),
        ("http://b:1/v1", 3),
    ]


@pytest.mark.parametrize(
    "value,message",
    [
        ({"url": "http://a:1/v1"}, "non-empty list"),
        (["http://a:1/v1"], "must be an object"),
        ([{"model": "m"}], "needs a url"),
        ([{"url": "http://a:1/v1", "permits": 2}], "unknown keys permits"),
        ([{"url": "http://a:1/v1", "gate_permits": 0}], "at least 1"),
        ([{"url": "http://a:1/v1", "api_key": 5}], "must be text"),
        ([{"url": "http://localhost:1/v1"}, {"url": "http://127.0.0.1:1/v1/"}], "twice"),
    ],
)
def test_a_malformed_pool_is_refused_with_what_is_wrong(settings, value, message):
    settings.STUDYQUEUE = {"LLM_ENDPOINTS": value}
    with pytest.raises(SettingsError, match=message):
        configured()
    assert [m.id for m in check_settings()] == ["studyqueue.E009"]


def test_an_empty_entry_in_llm_url_is_refused(settings):
    settings.STUDYQUEUE = {"LLM_URL": "http://a:1/v1,"}
    with pytest.raises(SettingsError, match="empty entry"):
        configured()


def test_an_empty_llm_endpoints_leaves_llm_url_in_force(settings):
    settings.STUDYQUEUE = {"LLM_URL": "http://a:1/v1", "LLM_ENDPOINTS": []}
    assert [e.url for e in configured()] == ["http://a:1/v1"]


def test_a_malformed_environment_value_says_it_must_be_json(settings, monkeypatch):
    settings.STUDYQUEUE = {}
    monkeypatch.setenv("STUDYQUEUE_LLM_ENDPOINTS", "http://a:1/v1")
    with pytest.raises(SettingsError, match="JSON list"):
        configured()


def test_each_servers_url_and_key_are_checked(settings):
    settings.STUDYQUEUE = {
        "LLM_ENDPOINTS": [
            {"url": "http://a:1/v1"},
            {"url": "ftp://b:1/v1"},
            {"url": "http://c:1/v1", "api_key": "bad\nkey"},
        ]
    }
    ids = [m.id for m in check_settings()]
    assert ids == ["studyqueue.E003", "studyqueue.E006"]
    assert "bad" not in " ".join(str(m.msg) for m in check_settings())


def test_a_key_never_shows_in_an_error(settings):
    settings.STUDYQUEUE = {"LLM_ENDPOINTS": [{"url": "http://a:1/v1", "api_key": ["s3cret"]}]}
    with pytest.raises(SettingsError) as caught:
        configured()
    assert "s3cret" not in str(caught.value)
