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


def test_e002_reply_cap_too_small():
    assert ids(LLM_MAX_REPLY_BYTES=10) == ["studyqueue.E002"]


def test_e004_llm_url_that_does_not_parse():
    assert ids(LLM_URL="http://[::1") == ["studyqueue.E004"]
    assert ids(LLM_URL="http://127.0.0.1:port/v1") == ["studyqueue.E004"]
    assert ids(LLM_URL="http:///v1") == ["studyqueue.E004"]


def test_e004_never_shows_the_url():
    with override_settings(STUDYQUEUE={"LLM_URL": "http://user:hunter22@[::1"}):
        (message,) = check_settings()
    assert "hunter22" not in str(message)


def test_e005_nan_and_infinite_numbers():
    assert ids(LLM_TIMEOUT_SECONDS="nan") == ["studyqueue.E005"]
    assert ids(STALE_MINUTES=float("inf"), HEARTBEAT_SECONDS="-inf") == [
        "studyqueue.E005",
        "studyqueue.E005",
    ]


def test_e006_api_key_with_control_or_non_ascii_characters():
    assert ids(LLM_API_KEY="sk-abc123\r") == ["studyqueue.E006"]
    assert ids(LLM_API_KEY="sk-äbc123") == ["studyqueue.E006"]
    assert ids(LLM_API_KEY="sk-abc123") == []


def test_e006_never_shows_the_key():
    with override_settings(STUDYQUEUE={"LLM_API_KEY": "sk-secret\n"}):
        (message,) = check_settings()
    assert "sk-secret" not in f"{message.msg} {message.hint}"


def test_e007_a_prompt_template_that_is_missing_or_does_not_render(settings, tmp_path):
    assert ids(PROMPT_TEMPLATE="no/such/template.txt") == ["studyqueue.E007"]
    broken = tmp_path / "broken.txt"
    broken.write_text("Question: {{ question.text|no_such_filter }}")
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]},
    ]
    assert ids(PROMPT_TEMPLATE="broken.txt") == ["studyqueue.E007"]


def test_e008_quality_retry_with_an_unknown_flag():
    assert ids(QUALITY_RETRY="truncated, too_long") == ["studyqueue.E008"]
    assert ids(QUALITY_RETRY="truncated,wrong_script") == []
