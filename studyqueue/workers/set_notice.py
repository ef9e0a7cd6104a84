"""The set notice handler: a question set is done; POST its counts, signed, to ``WEBHOOK_URL``
(a non-2xx answer fails the attempt; one idempotency key per completion), then complete the
job (``notices.Noticed``: the signal and the owner's e-mail). No LLM call, no gate slot."""

from __future__ import annotations

import asyncio
import logging

import httpx

from studyqueue.conf import conf
from studyqueue.models import ErrorCode, JobKind, StudyQuestionJob, StudyQuestionSet
from studyqueue.queue.store import JobResult, Skipped
from studyqueue.services.redact import RedactingFilter, path_secrets, redact, secrets_of
from studyqueue.sets import notices, question_sets
from studyqueue.workers.registry import WorkContext, failed, handler

logger = logging.getLogger("studyqueue.sets")


def _secrets() -> list[str]:
    """What a notice must not show: the webhook URL's credentials, path, query and secret."""
    url = conf.WEBHOOK_URL
    if not url:
        return []
    found = {*secrets_of(url, conf.WEBHOOK_SECRET), *path_secrets(url)}
    return sorted(found, key=len, reverse=True)


# httpx logs each request's URL (``HTTP Request: POST …``): the webhook's path never leaves.
logging.getLogger("httpx").addFilter(RedactingFilter(_secrets))


def _load(job: StudyQuestionJob) -> tuple[StudyQuestionSet, question_sets.Progress, str] | None:
    question_set = StudyQuestionSet.objects.filter(jobs=job).first()
    if question_set is None:
        return None
    return question_set, question_sets.progress(question_set), notices.completion_key(question_set)


@handler(JobKind.SET_NOTICE, priority=1, delivery=True)
async def run(job: StudyQuestionJob, ctx: WorkContext) -> JobResult:
    """Run one claimed set notice job; what happened, for the consumer to write."""
    found = await ctx.store.on_claims(_load, job)
    if found is None:
        return failed(job, ErrorCode.SET_MISSING, "the question set was deleted")
    question_set, progress, key = found
    if not progress.done:
        # Questions or checks were queued since: noticed once the set is done again.
        return notices.NotDone(
            question_set,
            key,
            ErrorCode.SET_NOT_DONE,
            "questions were added or checks queued since the set was done",
        )
    if question_set.noticed_key == key:
        # Another notice job of this completion got there first (``Noticed.write`` re-checks).
        return Skipped(ErrorCode.SET_NOTICED, notices.ALREADY_NOTICED)
    data = notices.payload(progress)
    url = conf.WEBHOOK_URL
    if url and (error := await post(url, data, key)) is not None:
        return failed(job, ErrorCode.WEBHOOK_FAILED, error)
    logger.info("study_set_noticed set=%s webhook=%s", question_set.pk, "yes" if url else "no")
    return notices.Noticed(question_set, progress, data, key)


async def post(url: str, data: dict[str, object], key: str) -> str | None:
    """POST the signed notice; None on a 2xx answer, else why not (redacted)."""
    body = notices.body_of(data)
    headers = {
        "Content-Type": "application/json",
        notices.IDEMPOTENCY_HEADER: key,
        notices.SIGNATURE_HEADER: notices.signature(body, conf.WEBHOOK_SECRET),
    }
    secrets = _secrets()
    budget = conf.WEBHOOK_TIMEOUT_SECONDS
    try:
        # httpx's timeouts are per read: a receiver dripping a byte now and then would hold
        # the notice forever. The deadline bounds the whole delivery (a transient failure).
        async with asyncio.timeout(budget), httpx.AsyncClient(timeout=budget) as client:
            response = await client.post(url, content=body, headers=headers)
    except TimeoutError:
        return redact(f"POST {url}: no complete answer within {budget:g} s", secrets)
    except httpx.HTTPError as exc:
        return redact(f"POST {url}: {type(exc).__name__}: {exc}", secrets)[:300]
    if 200 <= response.status_code < 300:
        return None
    return redact(f"POST {url}: HTTP {response.status_code}", secrets)
