"""Try the prompt on one question: print the rendered messages, or run that one job now."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from studyqueue import queue
from studyqueue.consumer import Consumer, default_worker_id
from studyqueue.management.commands._options import object_id
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.models import ExplanationRevision, JobKind, JobStatus, StudyQuestion
from studyqueue.prompts import build_messages, current_version
from studyqueue.queue import Outcome


class Command(BaseCommand):
    help = (
        "Explain one question now through the consumer's gate, client and storage (a new "
        "revision), or with --dry-run print the messages and the prompt version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question_id", type=object_id, metavar="QUESTION_ID")
        parser.add_argument(
            "--dry-run", action="store_true", help="print the prompt; call nothing, write nothing"
        )

    def handle(self, *args: Any, question_id: int, dry_run: bool, **options: Any) -> None:
        question = StudyQuestion.objects.filter(pk=question_id).first()
        if question is None:
            raise CommandError(f"no study question with id {question_id}")
        version = current_version()
        if dry_run:
            try:
                messages = build_messages(question)
            except ValidationError as exc:
                raise CommandError(
                    _("question %(id)s has invalid choices: %(reason)s")
                    % {"id": question.pk, "reason": " ".join(exc.messages)}
                ) from None
            self.stdout.write(f"prompt version {version.hash} ({version.label})")
            for message in messages:
                self.stdout.write(f"\n--- {message['role']}\n{message['content']}")
            return
        stopped_by: list[str] = []
        running: list[int] = []

        def stop() -> None:
            # Like runconsumer, but at once: whoever runs this command is waiting for it.
            stopped_by.append("signal")
            consumer.request_stop()  # not started yet: the worker hands the job back
            for job_id in running:
                consumer.cancel_job(job_id)  # calling the LLM: cancelled, handed back

        with (
            Consumer(worker_id=f"explain@{default_worker_id()}") as consumer,
            stop_on_signals(stop),
        ):
            job = self._claim(question)
            running.append(job.pk)
            outcome = consumer.run_one(job)
        job.refresh_from_db()
        if stopped_by and outcome != Outcome.COMPLETED:
            raise CommandError(
                _(
                    "stopped: job %(job)s is %(status)s again (attempt not counted), "
                    "for a consumer or the next explain"
                )
                % {"job": job.pk, "status": job.status}
            )
        if outcome != Outcome.COMPLETED:
            detail = f"{job.error_code}: {job.error_message}" if job.error_code else job.status
            raise CommandError(f"job {job.pk} {outcome}: {detail}")
        revision = ExplanationRevision.objects.filter(job=job).order_by("-pk").first()
        assert revision is not None
        self.stdout.write(revision.text)
        self.stdout.write(
            f"\n--- job {job.pk}, revision {revision.pk}, model {revision.model or '-'}, "
            f"prompt {version.hash}\n"
            f"tokens: prompt {revision.prompt_tokens}, completion {revision.completion_tokens}; "
            f"time to first token {_ms(revision.first_token_ms)}; "
            f"{revision.tokens_per_second or '-'} tokens/s; LLM time {_ms(job.llm_ms)}; "
            f"flags: {', '.join(revision.flags) or 'none'}"
        )

    def _claim(self, question: StudyQuestion) -> Any:
        """The question's explanation job, claimed by this command."""
        active = queue.enqueue(question, JobKind.EXPLANATION).job
        if active.status == JobStatus.PROCESSING:
            raise CommandError(
                f"question {question.pk} is being explained right now by {active.worker_id} "
                f"(job {active.pk}); try again when it is done"
            )
        job = queue.claim_job(active.pk, worker_id=f"explain@{default_worker_id()}")
        if job is None:
            raise CommandError(f"job {active.pk} could not be claimed (taken, or out of attempts)")
        return job


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value} ms"
