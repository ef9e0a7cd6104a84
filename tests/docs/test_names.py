"""The README and the manual name only what exists: every environment variable they name is
read, every management command exists, every file path is real, every admin action is named as
the action menu shows it, every system check is listed, and every admin label the Korean guide
quotes is one the admin shows. Each failure names what is missing and where."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

from tests.helpers import ROOT

DOCUMENTS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts),
]
CODE_SPANS = re.compile(r"`([^`\n]+)`")
# Where an environment variable the documents name may be read.
READERS = [
    *sorted((ROOT / "project").rglob("*.py")),
    *sorted((ROOT / "studyqueue").rglob("*.py")),
    ROOT / "Makefile",
    *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()),
]
PATH_ROOTS = ("studyqueue", "tests", "bench", "deploy", "project", "templates", "docs")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(PATH_ROOTS)})/[\w./@-]*)")
# Paths a reader creates by following the manual, or `make docs` builds (not in a checkout).
CREATED_BY_THE_READER = {"templates/studyqueue/", "docs/_build/html"}


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def where(path: Path, needle: str) -> str:
    body = text(path)
    return f"{name(path)}:{body[: body.index(needle)].count(chr(10)) + 1}"


def table_rows(body: str, header: str) -> list[str]:
    """The first cell of each row of the tables whose header starts with ``header``."""
    rows, inside = [], False
    for line in body.splitlines():
        if line.startswith(f"| {header} |"):
            inside = True
        elif inside and line.startswith("| ---"):
            continue
        elif inside and line.startswith("|"):
            rows.append(re.split(r"(?<!\\)\|", line)[1].strip())
        else:
            inside = False
    return rows


def _read_somewhere(variable: str) -> bool:
    return any(variable in text(path) for path in READERS)


@pytest.mark.parametrize("document", DOCUMENTS, ids=name)
def test_every_environment_variable_named_is_read(document):
    from studyqueue.conf import SETTINGS

    body = text(document)
    names = set(re.findall(r"\bSTUDYQUEUE_[A-Z][A-Z0-9_]*", body))
    for cell in table_rows(body, "variable"):
        names |= set(CODE_SPANS.findall(cell))
    unknown = [
        f"{variable} ({where(document, variable)})"
        for variable in sorted(names)
        if variable.removeprefix("STUDYQUEUE_") not in SETTINGS and not _read_somewhere(variable)
    ]
    assert not unknown, f"environment variables that nothing reads: {', '.join(unknown)}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=name)
def test_every_management_command_named_exists(document):
    body = text(document)
    named = set(re.findall(r"manage\.py ([a-z_]+)", body))
    commands = get_commands()
    missing = [
        f"{command} ({where(document, f'manage.py {command}')})"
        for command in sorted(named)
        if command not in commands
    ]
    assert not missing, f"commands that manage.py lacks: {', '.join(missing)}"


def _paths(document: Path) -> list[str]:
    found = []
    for span in CODE_SPANS.findall(text(document)):
        for path in PATH.findall(span):
            path = path.rstrip(".")
            if path not in found and "…" not in path and path not in CREATED_BY_THE_READER:
                found.append(path)
    return found


def _exists(path: str) -> bool:
    if (ROOT / path).exists():
        return True
    if path.endswith((".txt", ".html")):  # a template name (``studyqueue/explanation_prompt.txt``)
        try:
            get_template(path)
        except TemplateDoesNotExist:
            return False
        return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS, ids=name)
def test_every_path_named_exists(document):
    missing = [
        f"{path} ({where(document, path)})" for path in _paths(document) if not _exists(path)
    ]
    assert not missing, f"paths that do not exist: {', '.join(missing)}"


def test_every_admin_action_is_named_as_the_action_menu_shows_it():
    """A reader looks for the operator's guide's action name in the admin's action menu."""
    from django.apps import apps
    from django.contrib import admin
    from django.utils import translation

    guide = " ".join(text(ROOT / "docs" / "operators-guide.md").split())  # lines rewrapped
    missing = []
    with translation.override("en"):
        for model in apps.get_app_config("studyqueue").get_models():
            if not admin.site.is_registered(model):
                continue
            model_admin = admin.site.get_model_admin(model)
            for action in model_admin.actions or ():
                label = str(getattr(model_admin, action).short_description)
                if label not in guide:
                    missing.append(f"{model.__name__}: {label!r}")
    assert not missing, f"admin actions the operator's guide does not name: {', '.join(missing)}"


def test_every_system_check_is_listed_and_every_listed_one_exists():
    ids = set(re.findall(r'id="(studyqueue\.[EW]\d{3})"', text(ROOT / "studyqueue" / "checks.py")))
    listed = set(table_rows(text(ROOT / "docs" / "reference" / "settings.md"), "id"))
    listed = {cell.strip("`") for cell in listed}
    assert ids == listed, f"unlisted: {sorted(ids - listed)}; no such check: {sorted(listed - ids)}"


def _catalogue_strings() -> set[str]:
    """What the admin shows in Korean: our catalogue's and Django's admin's translations."""
    import django

    catalogues = [
        ROOT / "studyqueue" / "locale" / "ko" / "LC_MESSAGES" / "django.po",
        Path(django.__file__).parent
        / "contrib"
        / "admin"
        / "locale"
        / "ko"
        / "LC_MESSAGES"
        / "django.po",
    ]
    found: set[str] = set()
    for catalogue in catalogues:
        for block in re.findall(r'^msgstr "(.*?)"\n((?:".*"\n)*)', text(catalogue), re.M):
            found.add(block[0] + "".join(re.findall(r'^"(.*)"$', block[1], re.M)))
    return {s.replace('\\"', '"') for s in found if s}


def test_the_korean_guide_quotes_the_admin_as_it_shows_itself():
    """Every *italic* Korean label of the Korean guide (a menu, a page, an action, a filter,
    a badge) is a translation the admin shows: one term per concept, as the admin has it."""
    strings = _catalogue_strings()
    unknown = []
    for page in sorted((ROOT / "docs" / "ko").glob("*.md")):
        for span in re.findall(r"(?<![*\w])\*([^*\n]+)\*(?![*\w])", text(page)):
            for label in span.split(" → "):
                if re.search(r"[가-힣]", label) and label not in strings:
                    unknown.append(f"{label!r} ({where(page, label)})")
    assert not unknown, f"labels the admin does not show: {', '.join(unknown)}"
