"""Prompt versions and rendering: what shapes the output changes the version."""

from __future__ import annotations

import pytest

from studyqueue import prompts
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def template_dir(settings, tmp_path):
    """A project template directory that overrides the app's prompt templates."""
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    (tmp_path / "studyqueue").mkdir()
    return tmp_path / "studyqueue"


def test_the_version_is_stable_and_readable():
    first, again = prompts.current_version(), prompts.current_version()
    assert first == again and len(first.hash) == 12
    assert first.label == f"server default · max 1024 · t 0.2 · {first.hash[:7]}"


@pytest.mark.parametrize(
    "setting,value",
    [("LLM_MODEL", "qwen2.5-7b"), ("LLM_MAX_TOKENS", 2048), ("LLM_TEMPERATURE", 0.7)],
)
def test_a_model_or_sampling_change_is_a_new_version(settings, setting, value):
    before = prompts.current_version()
    settings.STUDYQUEUE = {setting: value}
    after = prompts.current_version()
    assert after.hash != before.hash
    if setting == "LLM_MODEL":
        assert after.label.startswith("qwen2.5-7b · ")


def test_a_template_edit_is_a_new_version(settings, tmp_path):
    before = prompts.current_version()
    # A project override of the app's template (read when the consumer starts).
    (tmp_path / "studyqueue").mkdir()
    (tmp_path / "studyqueue" / "explanation_prompt.txt").write_text("Explain: {{ question.text }}")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    after = prompts.current_version()
    assert after.hash != before.hash
    question = StudyQuestionFactory(text="Why is the sky blue?")
    assert prompts.build_messages(question)[1]["content"] == "Explain: Why is the sky blue?"


def test_templates_render_with_autoescape_off_and_the_questions_fields(template_dir):
    (template_dir / "explanation_prompt.txt").write_text(
        "{{ question.text }} | {% for c in choices %}[{{ c }}]{% endfor %} | {{ answer }}"
    )
    question = StudyQuestionFactory(text="Is <b>x</b> > 'y'?", choices=["a & b", "c"], answer="c")
    user = prompts.build_messages(question)[1]["content"]
    assert user == "Is <b>x</b> > 'y'? | [a & b][c] | c"
