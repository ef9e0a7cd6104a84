"""What the commands' ``--outdated`` measures against (``explanations.outdated``), said on
stderr so that stdout stays the result."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils.translation import gettext

from studyqueue.explanations import outdated


def versions(command: BaseCommand) -> list[str]:
    """The live consumers' prompt versions, said on the command's stderr, with a warning
    line for each doubt: no live consumer (this shell's version is used), consumers that
    disagree, this shell's settings differing from theirs."""
    basis = outdated.basis()
    doubts = basis.warnings if basis.from_live else [basis.summary, *basis.warnings]
    if basis.from_live:
        command.stderr.write(basis.summary)
    for doubt in doubts:
        command.stderr.write(
            command.style.WARNING(gettext("Warning: %(doubt)s") % {"doubt": doubt})
        )
    return basis.versions
