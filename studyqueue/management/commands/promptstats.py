"""Compare prompt versions: what each wrote, its flags, length, speed and reviews."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.admin.labels import flag_label
from studyqueue.explanations import check_cost, flag_trust, prompt_versions
from studyqueue.management.commands._options import bounded_int
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import CHECK_KINDS
from studyqueue.times import local_iso


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _rate(rate: flag_trust.Rate, of: str) -> str:
    """``37.5 % (12/32 …, 95 % 22.7-54.2 %)``, or, below the decisions a number needs,
    ``too few decisions (3/5 …)``."""
    counts = f"{rate.hits}/{rate.total} {of}"
    if not rate.enough or rate.interval is None:
        return _("too few decisions (%(counts)s)") % {"counts": counts}
    low, high = rate.interval
    return f"{_pct(rate.value)} ({counts}, 95 % {low * 100:.1f}-{high * 100:.1f} %)"


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Per prompt version: explanations written, share with each flag, mean length and "
        "completion tokens, tokens/s, approval and rejection rates, what checking cost, "
        "and each flag's precision and recall as a predictor of a rejection."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--newest",
            type=bounded_int(1, 100_000_000),
            help=_("only the newest N explanations the LLM wrote (default: all)"),
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help=_("one JSON object per version")
        )

    def handle(self, *args: Any, newest: int | None, as_json: bool, **options: Any) -> None:
        versions = prompt_versions.collect(newest)
        trust = flag_trust.collect(newest)
        costs = check_cost.collect()
        if as_json:
            for version in versions:
                self.stdout.write(self._json(version, trust, costs))
            return
        if not versions:
            self.stdout.write(_("No explanation written yet."))
            return
        for version in versions:
            self.stdout.write(self._text(version))
            self.stdout.write(self._checks(version.prompt_version, trust, costs))
        disputes = flag_trust.key_disputes()
        self.stdout.write(
            _("key disputes upheld by reviewers: %(rate)s")
            % {"rate": _rate(disputes, _("of the disputes decided"))}
        )

    def _checks(
        self,
        version: str,
        trust: dict[str, list[flag_trust.FlagTrust]],
        costs: dict[str, check_cost.VersionCost],
    ) -> str:
        """The version's checking cost, then each flag as a predictor of a rejection."""
        cost = check_cost.of(costs, version)
        checking = cost.checking
        lines = [
            _(
                "checking: %(tokens)s generated tokens (%(share)s of the explanations'), "
                "%(prompt)s prompt tokens, %(seconds)s s of LLM time (%(time_share)s)"
            )
            % {
                "tokens": checking.completion_tokens,
                "prompt": checking.prompt_tokens,
                "share": _pct(cost.token_share),
                "seconds": _num(checking.llm_ms / 1000, 1),
                "time_share": _pct(cost.time_share),
            }
        ]
        lines += [
            _("%(flag)s: precision %(precision)s, recall %(recall)s")
            % {
                "flag": _("any flag") if scored.flag == flag_trust.ANY else flag_label(scored.flag),
                "precision": _rate(scored.precision, _("of the flagged reviewed")),
                "recall": _rate(scored.recall, _("of the rejected or edited")),
            }
            for scored in flag_trust.of(trust, version)
            if scored.decisions
        ]
        return "".join(f"  {line}\n" for line in lines)

    def _json(
        self,
        v: prompt_versions.VersionStats,
        trust: dict[str, list[flag_trust.FlagTrust]],
        costs: dict[str, check_cost.VersionCost],
    ) -> str:
        cost = check_cost.of(costs, v.prompt_version)
        row = asdict(v) | {
            "first_at": local_iso(v.first_at),
            "last_at": local_iso(v.last_at),
            "flag_shares": dict(v.flag_shares),
            "approval_rate": v.approval_rate,
            "rejection_rate": v.rejection_rate,
            "flag_trust": {t.flag: t.as_dict() for t in flag_trust.of(trust, v.prompt_version)},
            "key_disputes_upheld": flag_trust.key_disputes().as_dict(),
            "cost": {kind: asdict(cost.of(kind)) for kind in ("explanation", *CHECK_KINDS)},
            "checking_token_share": cost.token_share,
            "checking_time_share": cost.time_share,
        }
        del row["flagged"]  # shown as flag_shares
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
