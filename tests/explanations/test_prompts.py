"""Prompt versions and rendering: what shapes the output changes the version."""

from __future__ import annotations

from pathlib import Path

import pytest

from studyqueue.explanations import prompts
from tests.factories import StudyQuestionFactory

pytestmark = pytest.mark.django_db
SHIPPED = Path(prompts.__file__).parent.parent / "templates" / "studyqueue"


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


def test_the_version_describes_the_template_that_renders(settings, template_dir):
    """A template file edited under a running process: Django's cached loader keeps
    rendering the template it compiled, and the version stays the one of that text (not of
    the file on disk) until the templates are loaded anew."""
    prompt = template_dir / "explanation_prompt.txt"
    prompt.write_text("First: {{ question.text }}")
    question = StudyQuestionFactory(text="Why is the sky blue?")
    first = prompts.current_version()
    assert prompts.build_messages(question)[1]["content"] == "First: Why is the sky blue?"
    prompt.write_text("Second: {{ question.text }}")
    assert prompts.current_version() == first
    assert prompts.build_messages(question)[1]["content"] == "First: Why is the sky blue?"
    settings.TEMPLATES = [{**settings.TEMPLATES[0]}]  # loaded anew, as after a restart
    assert prompts.current_version() != first
    assert prompts.build_messages(question)[1]["content"] == "Second: Why is the sky blue?"


def test_templates_render_with_autoescape_off_and_the_questions_fields(template_dir):
    (template_dir / "explanation_prompt.txt").write_text(
        "{{ question.text }} | {% for c in choices %}[{{ c }}]{% endfor %} | {{ answer }}"
    )
    question = StudyQuestionFactory(text="Is <b>x</b> > 'y'?", choices=["a & b", "c"], answer="c")
    user = prompts.build_messages(question)[1]["content"]
    assert user == "Is <b>x</b> > 'y'? | [a & b][c] | c"


def test_the_default_layout_lets_the_server_cache_everything_but_the_question():
    """the system message is the same for every question and holds the
    instructions; the user message holds only the question, its choices and key."""
    first, second = (prompts.build_messages(q) for q in prompts.sample_questions())
    assert first[0] == second[0]
    assert "step by step" in first[0]["content"]
    assert "same language as the question" in first[0]["content"]
    user = second[1]["content"]
    assert user == (
        "Question:\nWhich river flows through Cairo?\n\n"
        "Choices:\n1. Nile\n2. Danube\n3. Amazon\n\nCorrect answer: Nile"
    )
    layout = prompts.cache_layout()
    assert layout.shared_user_chars == 0 and not layout.system_varies


def test_the_default_prompt_asks_for_one_answer_line_in_the_system_message():
    """the model ends with a line the answer parser reads; the request is fixed
    text, so it lives in the system message (cached) and the user message is unchanged."""
    system = prompts.build_messages(prompts.sample_question())[0]["content"]
    for asked in ('"정답: "', '"Answer: "', '"정답: ②"', '"Answer: 2"', "question's language"):
        assert asked in system, asked
    assert system.rstrip().endswith('"Answer: Seoul".'), "the last instruction is the answer line"
    # The blind verifier reads the reasoning without the answer: none of it announces it.
    assert "before the last line, never state the answer" in system
    layout = prompts.cache_layout()
    assert layout.shared_user_chars == 0 and not layout.system_varies


def test_the_prompt_version_follows_the_shipped_template(settings, tmp_path):
    """A change to the shipped template (such as its answer line) is a new version: copying
    the shipped file unchanged keeps the version, and any edit to it changes it."""
    shipped = prompts.current_version()
    source = (SHIPPED / "explanation_system.txt").read_text(encoding="utf-8")
    versions = []
    for name, text in [("same", source), ("cut", source[: source.index("End with one line")])]:
        (tmp_path / name / "studyqueue").mkdir(parents=True)
        (tmp_path / name / "studyqueue" / "explanation_system.txt").write_text(text)
        settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path / name)]}]
        versions.append(prompts.current_version().hash)
    assert versions[0] == shipped.hash and versions[1] != shipped.hash


def test_a_question_without_choices_or_answer_renders_only_its_text():
    question = StudyQuestionFactory(text="Why is the sky blue?", choices=[], answer="")
    assert prompts.build_messages(question)[1]["content"] == "Question:\nWhy is the sky blue?"


@pytest.mark.parametrize(
    "first,second,shared",
    [
        ("Explain: red apples", "Explain: blue sea", 0),  # a label is not instructions
        ("a b c d e f g h i j k l m n o p q r s t", "a b c d e f g h i j k l m n o p q r s t", 39),
        ("x " + "fixed words here " * 2 + "x", "y " + "fixed words here " * 2 + "y", 33),
        ("x one two three four five y", "z one two three four five w", 23),
        # Pieces before and after the question both count.
        (
            "Begin these words now. Q1? End with these words.",
            "Begin these words now. Q2? End with these words.",
            22 + 21,
        ),
    ],
)
def test_shared_text_counts_every_fixed_run(first, second, shared):
    assert prompts.shared_text(first, second) == shared
