"""Try the prompt on one question: print the rendered messages, run that one job now, or try
another user prompt template on it without storing anything."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.template import Template, TemplateSyntaxError
from django.utils.translation import gettext as _

from studyqueue import quality, queue
from studyqueue.consumer import Consumer, default_worker_id
from studyqueue.management.commands._options import object_id
from studyqueue.management.commands._signals import stop_on_signals
from studyqueue.models import ExplanationRevision, JobKind, JobStatus, StudyQuestion
from studyqueue.prompts import build_messages, current_version, trial_template
from studyqueue.queue import Outcome
from studyqueue.services.llm import LLMClient, LLMError, LLMReply


class Command(BaseCommand):
    help = (
        "Explain one question now through the consumer's gate, client and storage (a new "
        "revision), or with --dry-run print the messages and the prompt version; "
        "--prompt-template PATH tries another user template without storing anything."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question_id", type=object_id, metavar="QUESTION_ID")
        parser.add_argument(
            "--dry-run", action="store_true", help="print the prompt; call nothing, write nothing"
        )
        parser.add_argument(
            "--prompt-template",
            metavar="PATH",
            help="try this user prompt template instead of the configured one: one call to "
            "the LLM server, the reply printed, nothing stored (no job, no revision)",
        )

    def handle(
        self,
        *args: Any,
        question_id: int,
        dry_run: bool,
        prompt_template: str | None,
        **options: Any,
    ) -> None:
        question = StudyQuestion.objects.filter(pk=question_id).first()
        if question is None:
            raise CommandError(f"no study question with id {question_id}")
        trial, source = self._trial(prompt_template) if prompt_template else (None, None)
        version = current_version(prompt_source=source)
        if dry_run or trial is not None:
            messages = self._messages(question, trial)
            kind = " (trial, not stored)" if trial is not None else ""
            self.stdout.write(f"prompt version {version.hash} ({version.label}){kind}")
            if dry_run:
                for message in messages:
                    self.stdout.write(f"\n--- {message['role']}\n{message['content']}")
                return
            self._try(question, messages)
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

    def _trial(self, path: str) -> tuple[Template, str]:
        """The template file to try, compiled: a one-line error if it cannot be read."""
        try:
            source = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise CommandError(
                _("cannot read %(path)s: %(reason)s") % {"path": path, "reason": reason}
            ) from None
        try:
            return trial_template(source), source
        except TemplateSyntaxError as exc:
            raise CommandError(
                _("%(path)s is not a valid template: %(reason)s") % {"path": path, "reason": exc}
            ) from None

    def _messages(self, question: StudyQuestion, trial: Template | None) -> list[dict[str, str]]:
        try:
            return build_messages(question, prompt=trial)
        except ValidationError as exc:
            raise CommandError(
                _("question %(id)s has invalid choices: %(reason)s")
                % {"id": question.pk, "reason": " ".join(exc.messages)}
            ) from None

    def _try(self, question: StudyQuestion, messages: list[dict[str, str]]) -> None:
        """One call straight to the LLM server (no job, no gate, nothing stored)."""

        async def ask() -> LLMReply:
            async with LLMClient.from_settings() as client:
                return await client.chat(messages)

        try:
            reply = asyncio.run(ask())
        except LLMError as exc:
            raise CommandError(
                _("the LLM call failed (%(code)s): %(reason)s")
                % {"code": exc.code, "reason": exc.message}
            ) from None
        flags = quality.flags_for(question.text, reply.content, reply.finish_reason)
        self.stdout.write(reply.content)
        self.stdout.write(
            f"\n--- trial, nothing stored; model {reply.model or '-'}\n"
            f"tokens: prompt {reply.prompt_tokens}, completion {reply.completion_tokens}; "
            f"time to first token {_ms(reply.first_token_ms)}; "
            f"{reply.tokens_per_second or '-'} tokens/s; LLM time {_ms(reply.elapsed_ms)}; "
            f"flags: {', '.join(flags) or 'none'}"
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
