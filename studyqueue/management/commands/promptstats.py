"""Compare prompt versions: what each wrote, its flags, length, speed and reviews."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.admin.labels import flag_label
from studyqueue.explanations import prompt_versions
from studyqueue.management.commands._options import bounded_int
from studyqueue.management.commands._translated import TranslatedCommand


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Per prompt version: explanations written, share with each flag, mean length and "
        "completion tokens, tokens/s, approval and rejection rates."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--newest",
            type=bounded_int(1, 100_000_000),
            default=None,
            help=_("only the newest N explanations the LLM wrote (default: all)"),
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help=_("one JSON object per version")
        )

    def handle(self, *args: Any, newest: int | None, as_json: bool, **options: Any) -> None:
        versions = prompt_versions.collect(newest)
        if as_json:
            for version in versions:
                self.stdout.write(self._json(version))
            return
        if not versions:
            self.stdout.write(_("No explanation written yet."))
            return
        for version in versions:
            self.stdout.write(self._text(version))

    def _json(self, v: prompt_versions.VersionStats) -> str:
        row = {
            "prompt_version": v.prompt_version,
            "label": v.label,
            "written": v.written,
            "first_at": v.first_at.isoformat() if v.first_at else None,
            "last_at": v.last_at.isoformat() if v.last_at else None,
            "flag_shares": dict(v.flag_shares),
            "mean_chars": v.mean_chars,
            "mean_completion_tokens": v.mean_completion_tokens,
            "tokens_per_second": v.tokens_per_second,
            "reviewed": v.reviewed,
            "approved": v.approved,
            "rejected": v.rejected,
            "edited": v.edited,
            "approval_rate": v.approval_rate,
            "rejection_rate": v.rejection_rate,
        }
        return json.dumps(row, ensure_ascii=False)

    def _text(self, v: prompt_versions.VersionStats) -> str:
        flags = ", ".join(
            f"{flag_label(name)} {_pct(share)}" for name, share in v.flag_shares
        ) or _("none")
        lines = [
            "  ".join((v.prompt_version or _("(none)"), v.label or "-")),
            _("written %(written)s; flags: %(flags)s") % {"written": v.written, "flags": flags},
            _("mean %(chars)s characters, %(tokens)s completion tokens, %(rate)s tokens/s")
            % {
                "chars": _num(v.mean_chars),
                "tokens": _num(v.mean_completion_tokens),
                "rate": _num(v.tokens_per_second, 1),
            },
            _(
                "reviewed %(reviewed)s: approved %(approved)s, rejected %(rejected)s, "
                "edited %(edited)s"
            )
            % {
                "reviewed": v.reviewed,
                "approved": _pct(v.approval_rate),
                "rejected": _pct(v.rejection_rate),
                "edited": v.edited,
            },
        ]
        return lines[0] + "\n" + "".join(f"  {line}\n" for line in lines[1:])
