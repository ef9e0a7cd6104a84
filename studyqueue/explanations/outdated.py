"""What an explanation is outdated against: the prompt versions the live consumers write with
(``queue.presence``), not this process's settings, which only count when no consumer is live.
``basis()`` says what it is; ``differences()`` where the settings here differ from theirs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.translation import gettext, ngettext

from studyqueue.conf import conf
from studyqueue.explanations.prompts import PromptVersion, current_version
from studyqueue.models import QueueConsumer, fit
from studyqueue.queue.presence import ConsumerState, live_consumers
from studyqueue.services import endpoints


@dataclass(frozen=True)
class LiveVersion:
    """A prompt version and how many live consumers write with it."""

    hash: str
    label: str
    consumers: int

    @property
    def shown(self) -> str:
        return self.label or self.hash[:7]


@dataclass(frozen=True)
class Basis:
    """The versions that count as current: the live consumers' (most used first), or ours."""

    live: tuple[LiveVersion, ...]
    local: PromptVersion

    @property
    def versions(self) -> list[str]:
        """An explanation written by none of these is outdated."""
        return [v.hash for v in self.live] if self.live else [self.local.hash]

    @property
    def from_live(self) -> bool:
        return bool(self.live)

    @property
    def disagree(self) -> bool:
        return len(self.live) > 1

    @property
    def short(self) -> str:
        """For a small space (the dashboard's tile)."""
        if not self.live:
            return gettext("against these settings: no live consumer")
        return ", ".join(v.hash[:7] for v in self.live)

    @property
    def summary(self) -> str:
        """One sentence: what "outdated" is measured against, and whose version that is."""
        if not self.live:
            return gettext(
                "No live consumer reports its prompt version: outdated against the prompt "
                "version of these settings, %(version)s."
            ) % {"version": self.local.label}
        if not self.disagree:
            (only,) = self.live
            return ngettext(
                "Outdated against prompt version %(version)s, used by %(count)s live consumer.",
                "Outdated against prompt version %(version)s, used by %(count)s live consumers.",
                only.consumers,
            ) % {"version": only.shown, "count": only.consumers}
        listed = "; ".join(
            ngettext(
                "%(version)s (%(count)s consumer)", "%(version)s (%(count)s consumers)", v.consumers
            )
            % {"version": v.shown, "count": v.consumers}
            for v in self.live
        )
        return gettext(
            "Outdated against the prompt versions of the live consumers: %(versions)s."
        ) % {"versions": listed}

    @property
    def warnings(self) -> list[str]:
        """Consumers that disagree, or settings here that differ from theirs."""
        out = []
        if self.disagree:
            out.append(
                gettext(
                    "The live consumers disagree on the prompt version: an explanation written "
                    "by any of theirs counts as current. Give them the same LLM_MODEL, "
                    "LLM_MAX_TOKENS, LLM_TEMPERATURE and prompt templates."
                )
            )
        if self.live and self.local.hash not in self.versions:  # the consumers write another
            out.append(
                gettext(
                    "The prompt version of these settings, %(version)s, differs from the live "
                    "consumers': LLM_MODEL, LLM_MAX_TOKENS, LLM_TEMPERATURE or the prompt "
                    "templates are not the same here as where they run."
                )
                % {"version": self.local.label}
            )
        return out


def basis(states: Sequence[ConsumerState] | None = None) -> Basis:
    """The versions that count as current among ``states`` (default: the live consumers)."""
    live = [s.record for s in (live_consumers() if states is None else states) if s.live]
    counts = Counter(r.prompt_version for r in live if r.prompt_version)
    labels = {r.prompt_version: r.prompt_label for r in live}
    versions = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return Basis(
        live=tuple(LiveVersion(h, labels[h], n) for h, n in versions), local=current_version()
    )


@dataclass(frozen=True)
class Difference:
    """A setting these settings give another value than the live consumers use."""

    setting: str  # LLM_URL, LLM_MODEL or PROMPT_VERSION
    here: str
    theirs: tuple[str, ...]  # each value a live consumer uses, sorted


def shown_urls() -> str:
    """This process's LLM URLs as a consumer records them (no credentials)."""
    return fit(QueueConsumer, "llm_url", endpoints.shown_urls())


def _version_shown(version: str, label: str) -> str:
    return f"{version[:7]} ({label})" if label else version[:7]


def differences() -> list[Difference]:
    """Where our LLM URL, model and prompt version differ from the live consumers'."""
    live = [s.record for s in live_consumers()]
    if not live:
        return []
    here = current_version()
    urls, model = shown_urls(), fit(QueueConsumer, "model", conf.LLM_MODEL)
    label = _version_shown(here.hash, fit(QueueConsumer, "prompt_label", here.label))
    versions = {(r.prompt_version, _version_shown(r.prompt_version, r.prompt_label)) for r in live}
    # Per setting: this process's value and how it is shown; each live consumer's, both.
    compared = [
        ("LLM_URL", urls, urls, {(r.llm_url, r.llm_url) for r in live}),
        ("LLM_MODEL", model, model, {(r.model, r.model) for r in live}),
        ("PROMPT_VERSION", here.hash, label, versions),  # compared by hash, shown with its label
    ]
    return [
        Difference(setting, shown, tuple(sorted({seen for _value, seen in theirs})))
        for setting, mine, shown, theirs in compared
        if {value for value, _seen in theirs} != {mine}
    ]
