"""Queue jobs for study questions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext, gettext_lazy

from studyqueue.explanations import next_step
from studyqueue.management.commands import _options, _outdated
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import (
    PROTECTED_REVIEWS,
    QUESTION_KINDS,
    JobKind,
    StudyQuestion,
    StudyQuestionJob,
)
from studyqueue.sets import question_sets


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Queue jobs: for given questions, every question missing an explanation, or every "
        "one whose explanation an older prompt version wrote."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        _options.flag(
            parser,
            "--missing",
            gettext("every question with text, no explanation and no active job of this kind"),
        )
        _options.flag(
            parser,
            "--outdated",
            gettext(
                "every question whose explanation none of the live consumers' prompt "
                "versions wrote (regenerate); with no live consumer, these settings' version"
            ),
        )
        _options.flag(
            parser,
            "--include-approved",
            gettext(
                "with --outdated: approved and reviewer-edited explanations too (their "
                "regeneration waits as a candidate for a reviewer to accept)"
            ),
        )
        parser.add_argument(
            "--limit",
            type=_options.bounded_int(1, 10_000_000),
            help=gettext("with --missing/--outdated: at most this many questions, oldest first"),
        )
        parser.add_argument(
            "--question",
            type=_options.object_id,
            nargs="+",
            default=[],
            metavar="ID",
            help=gettext("question ids"),
        )
        _options.set_option(
            parser,
            gettext(
                "only the questions of this question set; alone, the set's questions missing "
                "an explanation (as --missing)"
            ),
        )
        parser.add_argument(
            "--kind",
            choices=QUESTION_KINDS,
            default=JobKind.EXPLANATION,
            help=gettext("job kind (default: %(default)s)"),
        )

    def handle(
        self,
        *args: Any,
        missing: bool,
        outdated: bool,
        include_approved: bool,
        limit: int | None,
        question: list[int],
        kind: str,
        set_name: str | None,
        **options: Any,
    ) -> None:
        scope = StudyQuestion.objects.exclude(text="")
        if set_name is not None:
            in_set = question_sets.questions(_options.question_set(set_name))
            scope = scope.filter(pk__in=in_set.values("pk"))
            missing = missing or not (outdated or question)
        if not (missing or outdated or question):
            raise CommandError(
                gettext("nothing to enqueue: give --missing, --outdated or --question ID ...")
            )
        if limit is not None and not (missing or outdated):
            raise CommandError(gettext("--limit goes with --missing or --outdated"))
        if include_approved and not outdated:
            raise CommandError(gettext("--include-approved goes with --outdated"))
        ids = set(StudyQuestion.objects.filter(pk__in=question).values_list("pk", flat=True))
        if unknown := sorted(set(question) - ids):
            raise CommandError(
                gettext("no study question with id %(ids)s; nothing queued")
                % {"ids": ", ".join(map(str, unknown))}
            )
        active = StudyQuestionJob.objects.active().filter(kind=kind)
        waiting = scope.exclude(pk__in=active.values("study_question_id"))
        wanted = StudyQuestion.objects.none()
        if missing:
            wanted |= waiting.missing()
        if outdated:
            old = waiting.outdated(_outdated.versions(self))
            # A reviewer's approval or correction is not regenerated unless asked for.
            if not include_approved:
                old = old.exclude(current_revision__review_status__in=PROTECTED_REVIEWS)
            wanted |= old
        ids |= set(wanted.order_by("pk").values_list("pk", flat=True)[:limit])
        # Explanations queued already: what they need next may be their key audit.
        had_job = scope.missing().filter(pk__in=active.values("study_question_id"))
        queued_before = list(had_job.values_list("pk", flat=True)) if missing else []
        queued = next_step.queue_jobs(ids, kind)
        audits = queued.audits
        if kind == JobKind.EXPLANATION:
            audits += next_step.audit_waiting(queued_before)
        if audits:
            self.stdout.write(
                gettext("Created %(created)s key_audit job(s) to run before the explanations.")
                % {"created": audits}
            )
        self.stdout.write(
            gettext("Created %(created)s %(kind)s job(s); %(already)s already queued.")
            % {"created": queued.created, "kind": kind, "already": queued.already}
        )
