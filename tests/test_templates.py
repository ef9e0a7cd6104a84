"""The project's top-level ``templates/``: the shipped files render and change nothing, and a
template directory placed there overrides the admin's branding and the prompt templates.
The suite itself renders with a template directory of its own (``tests/settings.py``): a
deployment's overrides in ``templates/`` never change what the tests see."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib import admin
from django.template.loader import get_template
from django.urls import reverse

import project.settings
from studyqueue.explanations import prompts
from studyqueue.models import StudyQuestion
from tests.helpers import ROOT
from tests.settings import SUITE_TEMPLATES

pytestmark = pytest.mark.django_db

PROJECT_TEMPLATES = ROOT / "templates"
PROMPTS = ("studyqueue/explanation_system.txt", "studyqueue/explanation_prompt.txt")


@pytest.fixture
def project_templates(settings) -> None:
    """The templates as the project configures them (the suite has its own directory)."""
    (engine,) = settings.TEMPLATES
    settings.TEMPLATES = [{**engine, "DIRS": [PROJECT_TEMPLATES]}]


def test_the_project_templates_directory_is_searched_first():
    (engine,) = project.settings.TEMPLATES
    assert [Path(d) for d in engine["DIRS"]] == [PROJECT_TEMPLATES]
    assert PROJECT_TEMPLATES.is_dir()


@pytest.mark.parametrize(
    "path", sorted(p for p in PROJECT_TEMPLATES.rglob("*") if p.is_file()), ids=str
)
def test_every_shipped_file_is_the_template_in_use(project_templates, path):
    name = path.relative_to(PROJECT_TEMPLATES).as_posix()
    assert Path(get_template(name).origin.name) == path


def test_the_shipped_branding_draws_the_admin_as_django_does(project_templates, admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    header = f'<div id="site-name"><a href="{reverse("admin:index")}">{admin.site.site_header}</a>'
    assert header in page
    assert f"| {admin.site.site_title}</title>" in page
    assert "Acme" not in page  # the commented example stays a comment


def _templates_first(settings, directory: Path) -> None:
    """``directory`` in front of the project's templates (as a deployment's own would be)."""
    (engine,) = settings.TEMPLATES
    settings.TEMPLATES = [{**engine, "DIRS": [directory, *engine["DIRS"]]}]


def test_a_template_directory_brands_the_admin(admin_client, settings, tmp_path):
    (tmp_path / "admin").mkdir()
    (tmp_path / "admin" / "base_site.html").write_text(
        '{% extends "admin/base_site.html" %}'
        '{% block branding %}<div id="site-name">Acme study desk</div>{% endblock %}'
    )
    _templates_first(settings, tmp_path)
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert '<div id="site-name">Acme study desk</div>' in page
    # The site's own header is gone (its name, "studyqueue", is in every admin URL too).
    assert f'<a href="{reverse("admin:index")}">{admin.site.site_header}</a>' not in page


def test_a_template_directory_changes_the_prompt_and_its_version(settings, tmp_path):
    question = StudyQuestion(text="What is 2 + 2?", choices=["3", "4"], answer="4")
    before = prompts.current_version()
    (tmp_path / "studyqueue").mkdir()
    (tmp_path / "studyqueue" / "explanation_system.txt").write_text(
        "You are Acme's tutor. Answer in the question's language."
    )
    _templates_first(settings, tmp_path)
    system, user = prompts.build_messages(question)
    assert system["content"] == "You are Acme's tutor. Answer in the question's language."
    assert "What is 2 + 2?" in user["content"]  # the app's own user template still applies
    assert prompts.current_version().hash != before.hash


@pytest.fixture
def deployment_prompt():
    """Both prompt templates overridden in the checkout's ``templates/``, as the manual
    (docs/howto/prompt.md) tells an operator to; removed afterwards (an operator's own
    overrides are left as they are)."""
    made: list[Path] = []
    for name in PROMPTS:
        path = PROJECT_TEMPLATES / name
        if not path.exists():
            if not path.parent.exists():
                path.parent.mkdir()
                made.append(path.parent)
            path.write_text("A deployment's own prompt: {{ question.text }}", encoding="utf-8")
            made.append(path)
    try:
        yield
    finally:
        for path in reversed(made):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()


def test_the_suite_renders_the_shipped_prompt_whatever_templates_holds(settings, deployment_prompt):
    (engine,) = django_settings.TEMPLATES
    settings.TEMPLATES = [{**engine}]  # the templates loaded anew, the overrides now on disk
    question = StudyQuestion(text="What is 2 + 2?", choices=["3", "4"], answer="4")
    suite = prompts.current_version(), prompts.build_messages(question)
    for name in PROMPTS:
        assert Path(get_template(name).origin.name).is_relative_to(ROOT / "studyqueue"), name
    settings.TEMPLATES = [{**engine, "DIRS": []}]  # the app's templates alone: the shipped ones
    assert (prompts.current_version(), prompts.build_messages(question)) == suite
    assert [Path(d) for d in engine["DIRS"]] == [SUITE_TEMPLATES]
