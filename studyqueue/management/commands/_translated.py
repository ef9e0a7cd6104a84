"""The base of the studyqueue commands: their help in the operator's language."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.functional import Promise


class TranslatedCommand(BaseCommand):
    """A command whose ``help`` is marked with ``gettext_lazy``: argparse takes a plain
    string only, made here in the language active when the parser is built."""

    help: str | Promise = ""  # type: ignore[assignment]

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self.help = str(self.help)
        return super().create_parser(prog_name, subcommand, **kwargs)
