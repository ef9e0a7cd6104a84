"""Reference pages generated from the code, so that they cannot drift from it.

Directives (MyST: ```` ```{studyqueue-settings} ```` …):

- ``studyqueue-settings``: every setting of ``studyqueue.conf.SETTINGS``, with its
  environment variable, type, default, range and meaning (a setting added there appears here);
- ``studyqueue-commands``: every management command of the app, with what ``--help`` prints
  (read from the command's own argparse parser, ``create_parser``);
- ``studyqueue-models``: every model of the app with its fields (``verbose_name``,
  ``help_text``, choices) read from the models;
- ``studyqueue-choices dotted.path.To.Choices``: the values and labels of a ``TextChoices``
  class, with the one-line meaning of each where the code keeps one (``meanings`` option:
  the dotted path of a dict from value to meaning; ``language``: ``ko`` for the Korean
  guide, the labels and meanings from the app's catalogue).

Each generated section gets a label (``setting-batch-size``, ``command-enqueue``,
``model-studyquestionjob``) that other pages reference with ``{ref}``. Everything is
rendered in English (the commands and models speak the operator's language otherwise), but
for choices a Korean page asks for in Korean.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# Django's own options, the same for every command: the page says so once.
BASE_ARGUMENTS = {
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}
HELP_WIDTH = "90"  # argparse wraps to $COLUMNS; the same width on every machine


def label(prefix: str, name: str) -> str:
    """The label of a generated section: ``setting-gate-permits``."""
    return f"{prefix}-{name.lower().replace('_', '-')}"


@contextmanager
def english(language: str = "en") -> Iterator[None]:
    """Render in ``language`` (English unless a page asks for another: the Korean guide)."""
    from django.utils import translation

    with translation.override(language):
        yield


def shown(value: Any) -> str:
    """A number as conf.py's messages write it: ``60``, ``0.2``, ``8388608``."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _import(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- the data, as plain values (the tests read these too) ------------------------------


def setting_rows() -> list[dict[str, str]]:
    """One dict per setting of ``studyqueue.conf.SETTINGS``, in its order."""
    from studyqueue.conf import AUTO, SETTINGS

    rows = []
    for name, spec in SETTINGS.items():
        kind = {int: "integer", float: "number", str: "text", bool: "on or off"}.get(
            spec.type, spec.type.__name__
        )
        if spec.auto:
            kind += f" or {AUTO}"
        if spec.default == "":
            default = ""
        elif spec.secret:
            default = "(hidden)"
        elif spec.type is bool:
            default = "on" if spec.default else "off"
        else:
            default = shown(spec.default)
        rows.append(
            {
                "name": name,
                "env": f"STUDYQUEUE_{name}",
                "type": kind,
                "default": default,
                "range": spec.range_text() or "any",
                "meaning": spec.help,
                "secret": "yes" if spec.secret else "",
            }
        )
    return rows


def commands() -> list[tuple[str, str, str]]:
    """``(name, help, what --help prints)`` for each of the app's management commands."""
    from django.core.management import get_commands, load_command_class

    found = []
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        with english():
            for name, app in sorted(get_commands().items()):
                if app != "studyqueue":
                    continue
                command = load_command_class(app, name)
                # Django's documented switch for leaving its common options out.
                command.suppressed_base_arguments = BASE_ARGUMENTS
                parser = command.create_parser("manage.py", name)
                summary = str(command.help)
                parser.description = None  # shown once, above the block
                found.append((name, summary, parser.format_help().rstrip()))
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return found


def _model_doc(model: type) -> str:
    doc = (model.__doc__ or "").strip()
    if doc.startswith(f"{model.__name__}("):  # Django's generated docstring: no prose
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def _field_type(field: Any) -> str:
    kind = field.get_internal_type()
    if field.is_relation and field.related_model is not None:
        return f"{kind} to {field.related_model.__name__}"
    return kind


def model_rows() -> list[dict[str, Any]]:
    """One dict per model of the app: name, verbose name, description and fields."""
    from django.apps import apps

    found = []
    with english():
        for model in apps.get_app_config("studyqueue").get_models():
            meta = model._meta  # Django's documented Model _meta API
            fields = []
            for field in meta.get_fields():
                if not field.concrete:
                    continue
                choices = ", ".join(str(value) for value, _ in field.flatchoices or ())
                fields.append(
                    {
                        "name": field.name,
                        "type": _field_type(field),
                        "verbose_name": str(field.verbose_name),
                        "help_text": str(field.help_text),
                        "null": "yes" if field.null else "",
                        "choices": choices,
                    }
                )
            found.append(
                {
                    "name": model.__name__,
                    "verbose_name": str(meta.verbose_name),
                    "table": meta.db_table,
                    "proxy": meta.proxy,
                    "doc": _model_doc(model),
                    "fields": fields,
                }
            )
    return found


def choice_rows(
    dotted: str, meanings: str | None = None, language: str = "en"
) -> list[tuple[str, str, str]]:
    """``(value, label, meaning)`` for each member of a ``TextChoices`` class."""
    choices = _import(dotted)
    meaning = _import(meanings) if meanings else {}
    with english(language):
        return [
            (str(value), str(text), str(meaning.get(value, ""))) for value, text in choices.choices
        ]


# -- docutils nodes ----------------------------------------------------------------------


def _cell(content: nodes.Node | str) -> nodes.entry:
    entry = nodes.entry()
    if isinstance(content, str):
        content = nodes.paragraph(text=content)
    elif not isinstance(content, nodes.paragraph | nodes.literal_block):
        content = nodes.paragraph("", "", content)
    entry += content
    return entry


def table(headers: Sequence[str], rows: Iterable[Sequence[nodes.Node | str]]) -> nodes.table:
    """A plain table: a header row and body rows, each cell text or an inline node."""
    group = nodes.tgroup(cols=len(headers))
    for _ in headers:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    head += nodes.row("", *(_cell(h) for h in headers))
    group += head
    body = nodes.tbody()
    for row in rows:
        body += nodes.row("", *(_cell(c) for c in row))
    group += body
    result = nodes.table()
    result += group
    return result


def code(text: str) -> nodes.literal:
    return nodes.literal(text=text)


def default_cell(default: str) -> nodes.Node | str:
    return code(default) if default else "empty"


def prose(text: str) -> nodes.paragraph:
    """A docstring's sentence: ``double backticks`` as code, the rest as plain text."""
    result = nodes.paragraph()
    for number, part in enumerate(text.split("``")):
        if part:
            result += code(part) if number % 2 else nodes.Text(part)
    return result


def link(text: str, refid: str) -> nodes.reference:
    return nodes.reference("", "", code(text), internal=True, refid=refid)


def facts_line(items: Iterable[tuple[str, nodes.Node | str]]) -> nodes.paragraph:
    """``name: value · name: value`` in one paragraph, names emphasised."""
    result = nodes.paragraph()
    for number, (name, value) in enumerate(items):
        if number:
            result += nodes.Text(" · ")
        result += nodes.emphasis(text=f"{name}: ")
        result += nodes.Text(value) if isinstance(value, str) else value
    return result


class GeneratedSections(SphinxDirective):
    """A directive whose output is a list of sections, each with a label."""

    def section(self, ident: str, title: nodes.Node | str) -> nodes.section:
        section = nodes.section(ids=[ident])
        heading = nodes.title()
        heading += title if isinstance(title, nodes.Node) else nodes.Text(title)
        section += heading
        self.env.get_domain("std").note_hyperlink_target(
            ident, self.env.docname, ident, heading.astext()
        )
        return section


class SettingsDirective(GeneratedSections):
    """Every ``STUDYQUEUE`` setting: a summary table, then a section for each."""

    def run(self) -> list[nodes.Node]:
        rows = setting_rows()
        summary = table(
            ["setting", "default", "range", "meaning"],
            [
                [
                    link(r["name"], label("setting", r["name"])),
                    default_cell(r["default"]),
                    r["range"],
                    r["meaning"],
                ]
                for r in rows
            ],
        )
        result: list[nodes.Node] = [summary]
        for r in rows:
            section = self.section(label("setting", r["name"]), code(r["name"]))
            section += nodes.paragraph(text=r["meaning"][:1].upper() + r["meaning"][1:] + ".")
            facts: list[tuple[str, nodes.Node | str]] = [
                ("environment variable", code(r["env"])),
                ("type", r["type"]),
                ("default", default_cell(r["default"])),
                ("range", r["range"]),
            ]
            if r["secret"]:
                facts.append(("secret", "never shown: redacted in logs, pages and messages"))
            section += facts_line(facts)
            result.append(section)
        return result


class CommandsDirective(GeneratedSections):
    """Every management command of the app, with its options as ``--help`` prints them."""

    def run(self) -> list[nodes.Node]:
        result: list[nodes.Node] = []
        for name, summary, help_text in commands():
            section = self.section(label("command", name), code(f"manage.py {name}"))
            section += nodes.paragraph(text=summary)
            block = nodes.literal_block(help_text, help_text)
            block["language"] = "text"
            section += block
            result.append(section)
        return result


class ModelsDirective(GeneratedSections):
    """Every model of the app with its fields."""

    def run(self) -> list[nodes.Node]:
        result: list[nodes.Node] = []
        for model in model_rows():
            title = nodes.inline()
            title += code(model["name"])
            title += nodes.Text(f" ({model['verbose_name']})")
            section = self.section(label("model", model["name"]), title)
            if model["doc"]:
                section += prose(model["doc"])
            where = (
                f"A proxy of its parent model: no table of its own (table {model['table']})."
                if model["proxy"]
                else f"Table {model['table']}."
            )
            section += nodes.paragraph(text=where)
            rows = []
            for f in model["fields"]:
                meaning = f["help_text"]
                if f["choices"]:
                    meaning = f"{meaning} One of: {f['choices']}.".strip()
                if f["null"]:
                    meaning = f"{meaning} Blank (null) allowed.".strip()
                rows.append([code(f["name"]), f["type"], f["verbose_name"], meaning])
            section += table(["field", "type", "verbose name", "meaning"], rows)
            result.append(section)
        return result


class ChoicesDirective(SphinxDirective):
    """The values of one ``TextChoices`` class: value, label (and meaning)."""

    required_arguments = 1
    option_spec = {"meanings": directives.unchanged, "language": directives.unchanged}
    HEADERS = {"en": ["value", "label", "meaning"], "ko": ["값", "표시", "뜻"]}

    def run(self) -> list[nodes.Node]:
        language = self.options.get("language", "en")
        rows = choice_rows(self.arguments[0], self.options.get("meanings"), language)
        headers = self.HEADERS.get(language, self.HEADERS["en"])
        if any(meaning for _, _, meaning in rows):
            return [table(headers, [[code(v), t, m] for v, t, m in rows])]
        return [table(headers[:2], [[code(v), t] for v, t, _ in rows])]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("studyqueue-settings", SettingsDirective)
    app.add_directive("studyqueue-commands", CommandsDirective)
    app.add_directive("studyqueue-models", ModelsDirective)
    app.add_directive("studyqueue-choices", ChoicesDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
