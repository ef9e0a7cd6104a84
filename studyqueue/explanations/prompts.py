"""The explanation prompt: its templates (Django templates a project may override, rendered
with autoescape off), the chat messages of a question, and the prompt version."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.template import Context, Engine, Template

from studyqueue.conf import conf
from studyqueue.models import ExplanationRevision, StudyQuestion, fit, validate_choices


@dataclass(frozen=True)
class PromptVersion:
    """A short stable hash of what shapes the output, and a label a person can read."""

    hash: str
    label: str


# The source text of each compiled prompt template, read once: the loader hands back the same
# ``Template`` until it reloads the file, so the version describes the template that renders.
_sources: weakref.WeakKeyDictionary[Template, str] = weakref.WeakKeyDictionary()


def template_source(name: str) -> str:
    """A prompt template's source text (part of the version)."""
    template = Engine.get_default().get_template(name)
    if template not in _sources:
        # A file-based loader's origin name is the file's path (the app's or the project's).
        _sources[template] = Path(template.origin.name).read_text(encoding="utf-8")
    return _sources[template]


def current_version(*, max_tokens: int | None = None) -> PromptVersion:
    """The prompt version of today's settings and templates."""
    user = template_source(conf.PROMPT_TEMPLATE)
    return version_of(conf.SYSTEM_PROMPT_TEMPLATE, user, max_tokens=max_tokens)


def version_of(system: str, user: str, *, max_tokens: int | None = None) -> PromptVersion:
    """The version of a prompt: the system template named ``system``, the user template's
    source text ``user``, and the model settings."""
    shape = {
        "system": template_source(system),
        "user": user,
        "model": conf.LLM_MODEL,
        "max_tokens": max_tokens or conf.LLM_MAX_TOKENS,
        "temperature": conf.LLM_TEMPERATURE,
    }
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
    model = conf.LLM_MODEL or "server default"
    label = f"{model} · max {shape['max_tokens']} · t {conf.LLM_TEMPERATURE:g} · {digest[:7]}"
    return PromptVersion(digest, fit(ExplanationRevision, "prompt_label", label))


def render(name: str, context: dict[str, Any]) -> str:
    """Render one prompt template with autoescape off."""
    # The compiled template only: its source is the version's business.
    template = Engine.get_default().get_template(name)
    return template.render(Context(context, autoescape=False)).strip()


def build_messages(question: StudyQuestion) -> list[dict[str, str]]:
    """The chat messages for a question (invalid choices: ``ValidationError``)."""
    validate_choices(question.choices)
    context = {"question": question, "choices": question.choices, "answer": question.answer}
    return [
        {"role": "system", "content": render(conf.SYSTEM_PROMPT_TEMPLATE, context)},
        {"role": "user", "content": render(conf.PROMPT_TEMPLATE, context)},
    ]


def sample_question() -> StudyQuestion:
    """An unsaved question to try the templates on (the system check)."""
    return StudyQuestion(text="What is 2 + 2?", choices=["3", "4"], answer="4")


def sample_questions() -> tuple[StudyQuestion, StudyQuestion]:
    """Two unsaved questions with nothing in common: what their prompts share is fixed text."""
    return (
        sample_question(),
        StudyQuestion(
            text="Which river flows through Cairo?",
            choices=["Nile", "Danube", "Amazon"],
            answer="Nile",
        ),
    )


# A shared run shorter than this is a label ("Question:", "Choices:"), not an instruction.
_MIN_RUN_CHARS = 16


def shared_text(first: str, second: str) -> int:
    """Characters two rendered prompts share: runs of whole words in order, longer than a label."""
    a, b = re.findall(r"\s+|\S+", first), re.findall(r"\s+|\S+", second)
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    runs = (len("".join(a[block.a : block.a + block.size]).strip()) for block in blocks)
    return sum(run for run in runs if run >= _MIN_RUN_CHARS)


@dataclass(frozen=True)
class CacheLayout:
    """How the rendered prompts of two different questions overlap (``manage.py check``)."""

    shared_user_chars: int  # fixed text the two user messages share (instructions)
    system_varies: bool  # the system message differs (a question field in it)


def cache_layout() -> CacheLayout:
    """Render both sample questions and measure what defeats the server's prompt cache."""
    first, second = (build_messages(question) for question in sample_questions())
    return CacheLayout(
        shared_user_chars=shared_text(first[1]["content"], second[1]["content"]),
        system_varies=first[0]["content"] != second[0]["content"],
    )
