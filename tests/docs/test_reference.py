"""The reference is generated from the code: every setting of ``studyqueue/conf.py``, every
management command with its options and every model field appears in the built manual, and a
setting added to conf.py appears there with no other change."""

from __future__ import annotations

import html
import re

import pytest
from django.apps import apps
from django.core.management import get_commands

from studyqueue.conf import SETTINGS
from tests.docs.conftest import sphinx_build
from tests.helpers import ROOT


def text_of(page: str) -> str:
    """A built page's text: tags dropped, entities decoded."""
    body = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def studyqueue_commands() -> list[str]:
    return sorted(name for name, app in get_commands().items() if app == "studyqueue")


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_setting_is_in_the_settings_reference(manual, name):
    page = manual.page("reference/settings.html")
    spec = SETTINGS[name]
    anchor = f'id="setting-{name.lower().replace("_", "-")}"'
    assert anchor in page, f"{name}: no section of its own"
    text = text_of(page)
    assert f"STUDYQUEUE_{name}" in text
    assert spec.help in text, f"{name}: its meaning from conf.py"
    if spec.range_text():
        assert spec.range_text() in text, f"{name}: its range"


@pytest.mark.parametrize("name", studyqueue_commands())
def test_every_command_is_in_the_command_reference_with_its_options(manual, name):
    from django.core.management import load_command_class

    page = manual.page("reference/commands.html")
    anchor = f'id="command-{name.replace("_", "-")}"'
    assert anchor in page, f"{name}: no section"
    section = text_of(page.split(anchor, 1)[1].split('id="command-', 1)[0])
    parser = load_command_class("studyqueue", name).create_parser("manage.py", name)
    # The options as argparse knows them: what the command's own --help shows.
    own = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", parser.format_usage()))
    own -= {"--version", "--verbosity", "--settings", "--pythonpath", "--traceback"}
    own -= {"--no-color", "--force-color"}
    missing = sorted(option for option in own if option not in section)
    assert not missing, f"manage.py {name}: options missing from its reference: {missing}"


def test_every_model_field_is_in_the_models_reference(manual):
    text = text_of(manual.page("reference/models.html"))
    missing = [
        f"{model.__name__}.{field.name}"
        for model in apps.get_app_config("studyqueue").get_models()
        for field in model._meta.get_fields()
        if field.concrete and field.name not in text
    ]
    assert not missing, f"fields missing from the models reference: {missing}"
    for model in apps.get_app_config("studyqueue").get_models():
        assert f"model-{model.__name__.lower()}" in manual.page("reference/models.html")


def test_a_setting_added_to_conf_appears_in_the_reference(tmp_path):
    """One source: a setting declared in conf.py (here added by the manual's own
    configuration, as a new entry in SETTINGS would be) is in the built reference."""
    source = tmp_path / "src"
    source.mkdir()
    manual_conf = str(ROOT / "docs" / "conf.py")
    (source / "conf.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('manual', {manual_conf!r})\n"
        "manual = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(manual)\n"
        "globals().update({k: v for k, v in vars(manual).items() if not k.startswith('_')})\n"
        "exclude_patterns = []\n"
        "from studyqueue.conf import SETTINGS, Setting\n"
        "SETTINGS['DOCS_PROBE_SECONDS'] = Setting(\n"
        "    float, 7.0, 'a setting only this test declares', low=0.0, high=9.0, above_low=True\n"
        ")\n",
        encoding="utf-8",
    )
    (source / "index.md").write_text("# Settings\n\n```{studyqueue-settings}\n```\n")
    done = sphinx_build(source, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    text = text_of((tmp_path / "out" / "index.html").read_text(encoding="utf-8"))
    for expected in (
        "DOCS_PROBE_SECONDS",
        "STUDYQUEUE_DOCS_PROBE_SECONDS",
        "A setting only this test declares.",
        "greater than 0 and at most 9",
        "BATCH_SIZE",  # and the real ones beside it
    ):
        assert expected in text, expected
