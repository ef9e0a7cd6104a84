"""One test per system check id."""

from __future__ import annotations

import pytest
from django.test import override_settings

from studyqueue.checks import check_settings
from studyqueue.conf import SETTINGS

NUMERIC = [name for name, spec in SETTINGS.items() if spec.type in (int, float)]


def ids(**overrides) -> list[str]:
    with override_settings(STUDYQUEUE=overrides):
        return [m.id for m in check_settings()]


def test_defaults_are_clean():
    assert ids() == []


def test_e001_unparsable_value():
    assert ids(BATCH_SIZE="lots") == ["studyqueue.E001"]


def test_e002_out_of_range():
    assert ids(GATE_PERMITS=0, STALE_MINUTES=-1) == ["studyqueue.E002", "studyqueue.E002"]


def test_gate_permits_auto_passes_and_garbage_is_e001():
    assert ids(GATE_PERMITS="auto", GATE_MAX_PERMITS=16) == []
    assert ids(GATE_PERMITS="most") == ["studyqueue.E001"]
    assert ids(GATE_MAX_PERMITS=0) == ["studyqueue.E002"]


def test_every_numeric_setting_has_a_range_that_holds_its_default():
    for name in NUMERIC:
        spec = SETTINGS[name]
        assert spec.low is not None and spec.high is not None, name
        assert spec.low <= spec.default <= spec.high, name


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("far", [1e12, 10**30, -(10**12)])
def test_e002_far_out_of_range(name, far):
    """What would overflow a timedelta, a datetime or asyncio is refused up front."""
    value = int(far) if SETTINGS[name].type is int else far
    with override_settings(STUDYQUEUE={name: value}):
        (message,) = check_settings()
    assert message.id == "studyqueue.E002"
    assert message.msg.startswith(f"STUDYQUEUE[{name!r}] must be ")
    assert "at most" in message.msg and "Allowed:" in message.hint


def test_e002_names_the_environment_variable(monkeypatch):
    monkeypatch.setenv("STUDYQUEUE_STALE_MINUTES", "1e12")
    (message,) = check_settings()
    assert message.id == "studyqueue.E002"
    assert message.msg == (
        "STUDYQUEUE_STALE_MINUTES must be greater than 0 and at most 10080, got 1e+12"
    )


@pytest.mark.parametrize("name", NUMERIC)
def test_e002_the_bounds_themselves_are_allowed(name):
    spec = SETTINGS[name]
    assert "studyqueue.E002" not in ids(**{name: spec.high})
    if not spec.above_low:
        assert "studyqueue.E002" not in ids(**{name: spec.low})
    else:
        assert ids(**{name: spec.low}) == ["studyqueue.E002"]


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
    assert ids(BATCH_SIZE=float("inf"), BACKOFF_BASE_SECONDS="1e999") == [
        "studyqueue.E001",  # an integer setting: inf is no whole number
        "studyqueue.E005",
    ]
    assert ids(STALE_MINUTES=float("inf"), HEARTBEAT_SECONDS="-inf") == [
        "studyqueue.E005",
        "studyqueue.E005",
    ]


def test_e006_api_key_with_control_or_non_ascii_characters():
    assert ids(LLM_API_KEY="sk-abc123\r") == ["studyqueue.E006"]
    assert ids(LLM_API_KEY="sk-äbc123") == ["studyqueue.E006"]
    assert ids(LLM_API_KEY="sk-abc123") == []


def test_e012_an_api_token_a_header_cannot_carry():
    assert ids(API_TOKENS="tok-1, tok 2") == ["studyqueue.E012"]
    assert ids(API_TOKENS="tok-1,tök-2\r,") == ["studyqueue.E012"]
    assert ids(API_TOKENS=" tok-1, tok-2 ,") == []
    with override_settings(STUDYQUEUE={"API_TOKENS": "tok-1,hidden two"}):
        (error,) = check_settings()
    assert "hidden" not in f"{error.msg} {error.hint}"


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


# The app's user template before the instructions around the question.
INSTRUCTIONS_AROUND_THE_QUESTION = """{% autoescape off %}Explain the answer to this study \
question for a learner.

Question:
{{ question.text }}
{% if choices %}
Choices:
{% for choice in choices %}{{ forloop.counter }}. {{ choice }}
{% endfor %}{% endif %}{% if question.answer %}
Correct answer: {{ question.answer }}
{% endif %}
Explain step by step why the correct answer is right{% if choices %} and why the other \
choices are wrong{% endif %}. Be concise and accurate. Write in the same language as the \
question.{% endautoescape %}"""

SENTENCE = "Read the question carefully and think about each option before you answer it. "


@pytest.fixture
def prompt_dir(settings, tmp_path):
    """A template directory in front of the app's, for prompt template overrides."""
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    (tmp_path / "studyqueue").mkdir()
    return tmp_path / "studyqueue"


@pytest.mark.parametrize(
    "user_template",
    [
        pytest.param(INSTRUCTIONS_AROUND_THE_QUESTION, id="before-and-after"),
        pytest.param(SENTENCE * 3 + "\n{{ question.text }}", id="prefix"),
        pytest.param("{{ question.text }}\n" + SENTENCE * 3, id="suffix"),
        # Pieces each shorter than the limit, which together exceed it.
        pytest.param(
            SENTENCE + "{{ question.text }} " + SENTENCE + "{{ answer }} " + SENTENCE,
            id="pieces",
        ),
        pytest.param(
            "{% for c in choices %}{{ c }}: " + SENTENCE * 2 + "\n{% endfor %}{{ question.text }}",
            id="per-choice",
        ),
    ],
)
def test_w003_fixed_text_in_the_user_prompt(prompt_dir, user_template):
    (prompt_dir / "explanation_prompt.txt").write_text(user_template)
    with override_settings(STUDYQUEUE={}):
        (message,) = check_settings()
    assert message.id == "studyqueue.W003"
    assert "the instructions belong in the system template" in message.msg
    assert "SYSTEM_PROMPT_TEMPLATE" in message.hint


def test_w003_labels_and_a_short_line_are_not_instructions(prompt_dir):
    (prompt_dir / "explanation_prompt.txt").write_text(
        "Explain this one, briefly.\nQuestion: {{ question.text }}\n"
        "{% for c in choices %}Choice {{ forloop.counter }}: {{ c }}\n{% endfor %}"
        "Correct answer: {{ answer }}"
    )
    assert ids() == []


def test_w003_a_system_prompt_that_changes_with_the_question(prompt_dir):
    (prompt_dir / "explanation_system.txt").write_text(
        "You are a tutor. Topic: {{ question.text }}"
    )
    with override_settings(STUDYQUEUE={}):
        (message,) = check_settings()
    assert message.id == "studyqueue.W003"
    assert "the system prompt changes with the question" in message.msg


def test_w003_does_not_hide_the_timeout_warnings(prompt_dir):
    (prompt_dir / "explanation_prompt.txt").write_text(INSTRUCTIONS_AROUND_THE_QUESTION)
    assert ids(LLM_TIMEOUT_SECONDS=600, STALE_MINUTES=5) == ["studyqueue.W003", "studyqueue.W001"]


def test_e011_webhook_url_that_is_not_an_http_url_with_a_host():
    assert ids(WEBHOOK_URL="") == []
    assert ids(WEBHOOK_URL="https://hooks.example.org/services/T1/B2/abc") == []
    assert ids(WEBHOOK_URL="hooks.example.org/studyqueue") == ["studyqueue.E011"]
    assert ids(WEBHOOK_URL="http://[bad/x") == ["studyqueue.E011"]
    assert ids(WEBHOOK_URL="http://hooks.example.org:port/x") == ["studyqueue.E011"]
    assert ids(WEBHOOK_URL="https:///services/x") == ["studyqueue.E011"]


def test_e011_says_what_is_wrong_and_never_shows_the_url():
    with override_settings(STUDYQUEUE={"WEBHOOK_URL": "http://[bad/services/T1/B2/s3cr3tt0k3n"}):
        (message,) = check_settings()
    assert message.msg.startswith("STUDYQUEUE WEBHOOK_URL does not parse: ")
    assert "s3cr3tt0k3n" not in str(message)
    with override_settings(STUDYQUEUE={"WEBHOOK_URL": "hooks.example.org/x"}):
        (message,) = check_settings()
    assert message.msg == "STUDYQUEUE WEBHOOK_URL must start with http:// or https://"


@pytest.mark.django_db
def test_w005_a_url_without_v1_whose_chat_path_is_missing(llm_server):
    root = llm_server.url.removesuffix("/v1")
    with override_settings(STUDYQUEUE={"LLM_URL": root}):
        (message,) = check_settings()
    assert message.id == "studyqueue.W005"
    assert f"did you mean {root}/v1?" in message.msg
    with override_settings(STUDYQUEUE={"LLM_URL": llm_server.url}):
        assert check_settings() == [], "a URL with /v1 is not asked"
    # A URL pasted with its path: the hint is its /v1, not the path with /v1 after it.
    with override_settings(STUDYQUEUE={"LLM_URL": f"{llm_server.url}/chat/completions"}):
        (message,) = check_settings()
    assert f"did you mean {llm_server.url}?" in message.msg


@pytest.mark.parametrize(
    "name,meant",
    [("LLM_URL", "STUDYQUEUE_LLM_URL"), ("PORT", "STUDYQUEUE_BIND"), ("BIND", "STUDYQUEUE_BIND")],
)
def test_w006_a_likely_meant_variable_that_nothing_reads(monkeypatch, name, meant):
    from studyqueue.checks import check_environment

    for other in ("LLM_URL", "PORT", "BIND", "STUDYQUEUE_BIND"):
        monkeypatch.delenv(other, raising=False)
    assert check_environment() == []
    monkeypatch.setenv(name, "http://127.0.0.1:8799/v1" if name == "LLM_URL" else "8751")
    (message,) = check_environment()
    assert message.id == "studyqueue.W006"
    assert f"{name} is set in the environment but studyqueue does not read it: set {meant}" in (
        message.msg
    )
    if name != "LLM_URL":
        monkeypatch.setenv("STUDYQUEUE_BIND", "127.0.0.1:8751")
        assert check_environment() == [], "the same port under the right name"
