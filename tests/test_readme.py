"""The README names only what exists: every setting and environment variable, management
command and file path it mentions is real. Each failure names what is missing and where."""

from __future__ import annotations

import re

import pytest
from django.core.management import get_commands
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

from studyqueue.conf import SETTINGS
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
CODE_SPANS = re.compile(r"`([^`\n]+)`")
# Where an environment variable the README names may be read (the README itself not).
READERS = [
    *sorted((ROOT / "project").rglob("*.py")),
    *sorted((ROOT / "studyqueue").rglob("*.py")),
    ROOT / "Makefile",
    *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()),
]
PATH_ROOTS = ("studyqueue", "tests", "bench", "deploy", "project", "templates")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(PATH_ROOTS)})/[\w./@-]*)")


def line_of(text: str) -> int:
    return README[: README.index(text)].count("\n") + 1


def table_rows(header: str) -> list[str]:
    """The first cell of each row of the README tables whose header starts with ``header``."""
    rows, inside = [], False
    for line in README.splitlines():
        if line.startswith(f"| {header} |"):
            inside = True
        elif inside and line.startswith("| ---"):
            continue
        elif inside and line.startswith("|"):
            rows.append(re.split(r"(?<!\\)\|", line)[1].strip())  # "\|" inside a cell
        else:
            inside = False
    return rows


def code(cell: str) -> str:
    match = CODE_SPANS.search(cell)
    assert match, f"table cell without a `name`: {cell!r}"
    return match.group(1)


def test_every_row_of_the_settings_table_is_a_setting():
    named = [code(cell) for cell in table_rows("setting")]
    assert named, "the README's settings table ('| setting | default | meaning |') is gone"
    unknown = [
        f"{name} (README line {line_of(f'| `{name}` |')})" for name in named if name not in SETTINGS
    ]
    assert not unknown, f"settings the README lists but conf.SETTINGS lacks: {', '.join(unknown)}"


def test_every_setting_has_its_row_in_the_settings_table():
    missing = sorted(set(SETTINGS) - {code(cell) for cell in table_rows("setting")})
    assert not missing, f"settings in conf.SETTINGS the README's table lacks: {', '.join(missing)}"


def _read_somewhere(variable: str) -> bool:
    return any(variable in path.read_text(encoding="utf-8", errors="replace") for path in READERS)


def test_every_environment_variable_the_readme_names_is_read():
    """``STUDYQUEUE_<NAME>`` of a setting, or a variable the project, app, Makefile or deploy
    files read (the first configuration table, ``STUDYQUEUE_BIND``…)."""
    names = set(re.findall(r"\bSTUDYQUEUE_[A-Z][A-Z0-9_]*", README))
    names |= {code(cell) for cell in table_rows("variable")}
    unknown = [
        f"{name} (README line {line_of(name)})"
        for name in sorted(names)
        if name.removeprefix("STUDYQUEUE_") not in SETTINGS and not _read_somewhere(name)
    ]
    assert not unknown, (
        f"environment variables the README names that nothing reads: {', '.join(unknown)}"
    )


def test_every_management_command_the_readme_names_exists():
    named = set(re.findall(r"manage\.py ([a-z_]+)", README))
    named |= {
        code(cell).split()[1] for cell in table_rows("command") if cell.startswith("`manage.py")
    }
    commands = get_commands()
    missing = [
        f"{name} (README line {line_of(f'manage.py {name}')})"
        for name in sorted(named)
        if name not in commands
    ]
    assert not missing, f"commands the README names that manage.py lacks: {', '.join(missing)}"


def _paths() -> list[str]:
    found = []
    for span in CODE_SPANS.findall(README):
        for path in PATH.findall(span):
            path = path.rstrip(".")
            if path not in found and "…" not in path:
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


def test_the_readme_names_paths():
    paths = _paths()
    assert "studyqueue/queue/transitions.py" in paths and "studyqueue/queue/notify.py" in paths


@pytest.mark.parametrize("path", _paths())
def test_every_path_the_readme_names_exists(path):
    assert _exists(path), f"the README names {path} (line {line_of(path)}), which does not exist"


def test_every_admin_action_is_named_as_the_action_menu_shows_it():
    """A reader looks for the README's action name in the admin's action menu."""
    from django.apps import apps
    from django.contrib import admin

    missing = []
    for model in apps.get_app_config("studyqueue").get_models():
        if not admin.site.is_registered(model):
            continue
        model_admin = admin.site.get_model_admin(model)
        for name in model_admin.actions or ():
            label = str(getattr(model_admin, name).short_description)
            if label not in README:
                missing.append(f"{model.__name__}: {label!r}")
    assert not missing, f"admin actions the README does not name as shown: {', '.join(missing)}"
