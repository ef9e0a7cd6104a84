"""Try the prompt on one question: print the rendered messages, or run that one job now."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from studyqueue.admin.labels import flag_labels
from studyqueue.consumer.consumer import Consumer, default_worker_id
from studyqueue.explanations import key_audit, outdated, prompts
from studyqueue.management.commands._options import flag, object_id
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.management.commands._translated import TranslatedCommand
from studyqueue.models import (
    ExplanationRevision,
    JobKind,
    JobStatus,
    StudyQuestion,
    StudyQuestionJob,
    key_audit_holds,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Explain one question now through the consumer's gate, client and storage (a new "
        "revision), or with --dry-run print the messages and the prompt version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question_id", type=object_id, metavar="QUESTION_ID")
        flag(parser, "--dry-run", _("print the prompt; call nothing, write nothing"))

    def handle(self, *args: Any, question_id: int, dry_run: bool, **options: Any) -> None:
        question = StudyQuestion.objects.filter(pk=question_id).first()
        if question is None:
            raise CommandError(_("no study question with id %(id)s") % {"id": question_id})
        version = prompts.current_version()
        self._warn_if_settings_differ()
        if dry_run:
            try:
                messages = prompts.build_messages(question)
            except ValidationError as exc:
                raise CommandError(
                    _("question %(id)s has invalid choices: %(reason)s")
                    % {"id": question.pk, "reason": " ".join(exc.messages)}
                ) from None
            line = _("prompt version %(hash)s (%(label)s)")
            self.stdout.write(line % {"hash": version.hash, "label": version.label})
            for message in messages:
                self.stdout.write(f"\n--- {message['role']}\n{message['content']}")
            return
        if key_audit_holds() and key_audit.key_checks().filter(pk=question.pk).exists():
            # The claim holds it for a reviewer; so does this command, which claims directly.
            raise CommandError(
                _(
                    "question %(id)s is held: its key audit disputed the key, and a reviewer "
                    "has not kept or changed it yet (Explanation reviews, key check)"
                )
                % {"id": question.pk}
            )
        running: list[int] = []

        def stop() -> None:
            # Like runconsumer, but at once: whoever runs this command is waiting for it.
            consumer.request_stop()  # not started yet: the worker hands the job back
            for job_id in running:
                consumer.cancel_job(job_id)  # calling the LLM: cancelled, handed back

        with (
            Consumer(worker_id=f"explain@{default_worker_id()}") as consumer,
            stop_on_signals(stop),
        ):
            job, own = self._claim(question, consumer)
            running.append(job.pk)
            outcome = consumer.run_one(job)
        job.refresh_from_db()
        if outcome != transitions.Outcome.COMPLETED and job.status == JobStatus.SKIPPED and own:
            # Its own job is left for nobody: a consumer would write it with its settings.
            raise CommandError(
                _(
                    "job %(job)s did not complete (%(detail)s); it is skipped, not left for "
                    "a consumer, which may write with other settings"
                )
                % {"job": job.pk, "detail": _detail(job, job.error_message)}
            )
        if consumer.stopping() and outcome != transitions.Outcome.COMPLETED:  # a stop signal came
            raise CommandError(
                _(
                    "stopped: job %(job)s is %(status)s again (attempt not counted), "
                    "for a consumer or the next explain"
                )
                % {"job": job.pk, "status": job.status}
            )
        if outcome != transitions.Outcome.COMPLETED:
            raise CommandError(
                _("job %(job)s %(outcome)s: %(detail)s")
                % {"job": job.pk, "outcome": outcome, "detail": _detail(job, job.status)}
            )
        revision = ExplanationRevision.objects.filter(job=job).order_by("-pk").first()
        assert revision is not None
        self.stdout.write(revision.text)
        heading = _("job %(job)s, revision %(revision)s, model %(model)s, prompt %(prompt)s") % {
            "job": job.pk,
            "revision": revision.pk,
            "model": revision.model or "-",
            "prompt": version.hash,
        }
        self.stdout.write(f"\n--- {heading}\n" + _figures(revision, job.llm_ms))

    def _warn_if_settings_differ(self) -> None:
        """Say on stderr where these settings differ from the live consumers': this
        command writes with its own (LLM URL, model, prompt version), not theirs."""
        for diff in outdated.differences():
            self.stderr.write(
                self.style.WARNING(
                    _(
                        "Warning: %(setting)s here is %(here)s; the live consumers use "
                        "%(theirs)s. This command calls and writes with the settings here."
                    )
                    % {
                        "setting": diff.setting,
                        "here": diff.here or _("(the server's default)"),
                        "theirs": ", ".join(t or _("(the server's default)") for t in diff.theirs),
                    }
                )
            )

    def _claim(self, question: StudyQuestion, consumer: Consumer) -> tuple[Any, bool]:
        """The question's explanation job, claimed by this command, and whether this command
        created it (then it is never left pending for a consumer: ``JobStore.kept``)."""
        jobs = StudyQuestionJob.objects.all()
        with transaction.atomic(using=jobs.db):  # a job it creates is never seen pending
            queued = enqueue(question, JobKind.EXPLANATION)
            active = queued.job
            if active.status == JobStatus.PROCESSING:
                raise CommandError(
                    _(
                        "question %(question)s is being explained right now by %(worker)s "
                        "(job %(job)s); try again when it is done"
                    )
                    % {"question": question.pk, "worker": active.worker_id, "job": active.pk}
                )
            job = transitions.claim_job(active.pk, worker_id=consumer.worker_id)
        if job is None:
            raise CommandError(
                _("job %(job)s could not be claimed (taken, or out of attempts)")
                % {"job": active.pk}
            )
        if queued.created:
            consumer.store.kept.add(job.pk)
        return job, queued.created


def _figures(revision: ExplanationRevision, llm_ms: int | None) -> str:
    """The revision's tokens, speed and flags, as the summary's last line."""
    return _(
        "tokens: prompt %(prompt)s, completion %(completion)s; time to first token "
        "%(first)s; %(rate)s tokens/s; LLM time %(llm)s; flags: %(flags)s"
    ) % {
        "prompt": revision.prompt_tokens,
        "completion": revision.completion_tokens,
        "first": _ms(revision.first_token_ms),
        "rate": revision.tokens_per_second or "-",
        "llm": _ms(llm_ms),
        "flags": flag_labels(revision.flags),
    }


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value} ms"


def _detail(job: StudyQuestionJob, otherwise: str) -> str:
    """The job's error as ``code: message``; ``otherwise`` when it has none."""
    return f"{job.error_code}: {job.error_message}" if job.error_code else otherwise
