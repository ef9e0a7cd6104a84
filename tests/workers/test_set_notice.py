"""When a question set is done, exactly one notice (``workers/set_notice.py``): the signed
webhook POST against a real HTTP receiver (``conftest.Receiver``), the ``set_completed``
signal and the owner's e-mail; a failing receiver retried with the same idempotency key; a
crash between the last job and the notice still sending exactly one; a later completion
noticed again; a set whose verification is still to run noticed only once it ran, with the
checks' counts; notices beside explanations, never in their places."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from studyqueue.models import (
    JobKind,
    JobStatus,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
)
from studyqueue.queue.enqueue import enqueue, enqueue_for_set, enqueue_many
from studyqueue.queue.pauses import pause, resume
from studyqueue.sets import notices, question_sets
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory
from tests.helpers import ROOT, ports, wait_for
from tests.llm_server import LLMServer
from tests.workers.conftest import SECRET

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = ["Busan", "Seoul", "Incheon"]
# The explanation's writer: reasoning, then the answer line (the key, so no quality flag).
EXPLANATION = "Seoul has been the capital since 1394, when the Joseon court moved there.\n정답: ②"


@pytest.fixture
def signals() -> Iterator[list[dict[str, object]]]:
    seen: list[dict[str, object]] = []

    def record(sender: object, **kwargs: object) -> None:
        seen.append(kwargs)

    notices.set_completed.connect(record)
    yield seen
    notices.set_completed.disconnect(record)


def _set(name: str, n: int, **fields: object) -> StudyQuestionSet:
    questions = [StudyQuestionFactory(text=f"{name}: what is {i} + 1?") for i in range(n)]
    question_set, _ = question_sets.add(name, [q.pk for q in questions])
    StudyQuestionSet.objects.filter(pk=question_set.pk).update(**fields)
    enqueue_many([q.pk for q in questions])
    return StudyQuestionSet.objects.get(pk=question_set.pk)


def _drain() -> None:
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())


# The settings a drain process takes from the test (as STUDYQUEUE_<NAME> variables).
_CHILD_SETTINGS = (
    "LLM_URL",
    "WEBHOOK_URL",
    "WEBHOOK_SECRET",
    "KEY_AUDIT",
    "VERIFY",
    "STEP_CHECK",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_JITTER",
    "MAX_ATTEMPTS",
    "WEBHOOK_TIMEOUT_SECONDS",
)


def _drain_process(env: dict[str, str], python: str, settings, seconds: float = 60) -> float:
    """``runconsumer --drain`` as a real process on the test's database; how long it took.
    Fails, instead of hanging the suite, when it does not return in time."""
    ours = settings.STUDYQUEUE
    env = {**env, **{f"STUDYQUEUE_{k}": str(ours[k]) for k in _CHILD_SETTINGS if k in ours}}
    started = time.monotonic()
    try:
        subprocess.run(
            [python, "manage.py", "runconsumer", "--drain"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=seconds,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"runconsumer --drain still running after {seconds} s")
    return time.monotonic() - started


def test_a_done_set_sends_one_signed_notice_a_signal_and_an_email(receiver, signals):
    question_set = _set("midterm", 3, owner_email="teacher@example.org")
    _drain()
    assert len(receiver.posts) == 1
    headers, body = receiver.posts[0]
    data = json.loads(body)
    assert {k: data[k] for k in ("event", "set", "total", "completed", "failed", "flagged")} == {
        "event": "set.completed",
        "set": "midterm",
        "total": 3,
        "completed": 3,
        "failed": 0,
        "flagged": 0,
    }
    assert data["finished_at"]
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Studyqueue-Signature"], expected)
    assert headers["Idempotency-Key"].startswith(f"set-{question_set.pk}-")
    assert [s["payload"] for s in signals] == [data]
    assert [m.to for m in mail.outbox] == [["teacher@example.org"]]
    assert "midterm: 3 of 3 explained (0 approved, 0 flagged), 0 failed, 0 waiting" in (
        mail.outbox[0].body
    )
    _drain()  # nothing new: no second notice
    assert len(receiver.posts) == 1 and len(signals) == 1
    notice = StudyQuestionJob.objects.get(kind=JobKind.SET_NOTICE)
    assert (notice.status, notice.question_set_id) == (JobStatus.COMPLETED, question_set.pk)


def test_a_failing_webhook_is_retried_with_the_same_key_and_the_signal_goes_once(receiver, signals):
    receiver.statuses = [500, 503]
    _set("quiz", 2)
    for _ in range(3):
        _drain()
    assert len(receiver.posts) == 3
    keys = {headers["Idempotency-Key"] for headers, _ in receiver.posts}
    assert len(keys) == 1  # one completion, delivered three times until it was accepted
    notice = StudyQuestionJob.objects.get(kind=JobKind.SET_NOTICE)
    assert (notice.status, notice.attempts) == (JobStatus.COMPLETED, 3)
    assert len(signals) == 1


def test_a_crash_between_the_last_job_and_the_notice_still_sends_exactly_one(receiver, signals):
    """The set's jobs completed, and the consumer that ended them died before it looked for
    the sets they completed: the next consumer's sweep finds it."""
    question = StudyQuestionFactory(explanation="Four.")
    StudyQuestionJobFactory(
        study_question=question, status=JobStatus.COMPLETED, completed_at=question.created_at
    )
    question_sets.add("crashed", [question.pk])
    _drain()
    _drain()
    assert len(receiver.posts) == 1 and len(signals) == 1


def test_a_set_that_grows_after_its_notice_is_noticed_again_when_done_again(receiver):
    question_set = _set("weekly", 1)
    _drain()
    more = StudyQuestionFactory(text="weekly: one more")
    question_sets.add("weekly", [more.pk])
    enqueue(more)
    _drain()
    assert len(receiver.posts) == 2
    first, second = (json.loads(body) for _, body in receiver.posts)
    assert (first["total"], second["total"]) == (1, 2)
    assert question_set.jobs.filter(kind=JobKind.SET_NOTICE).count() == 2


def _explained(name: str, text: str) -> None:
    """Add an explained question, its job ended now, to set ``name``: done at once."""
    question = StudyQuestionFactory(text=text, explanation="Four.")
    StudyQuestionJobFactory(
        study_question=question, status=JobStatus.COMPLETED, completed_at=timezone.now()
    )
    question_sets.add(name, [question.pk])


def test_a_set_done_again_while_its_notice_is_delivered_gets_a_notice_after_it(
    receiver, signals, make_consumer
):
    """A consumer (a thread, its own connections) delivers a set's notice to a receiver that
    holds its answer; meanwhile the set grows and is done again, and another sweep finds the
    notice active. Once the receiver answers, the new completion is noticed too."""
    _explained("grown", "grown: 2 + 2?")
    assert notices.queue_due_notices() == 1
    with receiver.holding(make_consumer(worker_id="deliverer")):
        wait_for(lambda: receiver.posts, timeout=20, what="the first completion's POST")
        _explained("grown", "grown: 3 + 3?")
        assert notices.queue_due_notices() == 0  # the active notice read the first one
    _drain()
    assert [json.loads(body)["total"] for _, body in receiver.posts] == [1, 2]
    first, second = (headers["Idempotency-Key"] for headers, _ in receiver.posts)
    assert first != second and [s["payload"]["total"] for s in signals] == [1, 2]


def test_without_a_webhook_the_signal_still_goes(settings, llm_server, signals):
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    _set("local", 2)
    _drain()
    assert len(signals) == 1 and signals[0]["payload"]["completed"] == 2


def test_the_notice_waits_for_the_sets_checks_and_carries_the_verifiers_flag(
    receiver, signals, settings, llm_server: LLMServer
):
    """Both keys audited (one disputed, its explanation written anyway), both explanations
    written, their verifications still to run (paused): no notice. Once they ran, one
    notice whose ``flagged`` and check counts include the verifier's flag."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "KEY_AUDIT": True,
        "KEY_AUDIT_HOLDS": False,
        "VERIFY": True,
    }
    llm_server.answer = EXPLANATION
    flagged = StudyQuestionFactory(
        text="Capital? AUDIT:222 VERIFY:3", choices=CHOICES, answer="Seoul"
    )
    disputed = StudyQuestionFactory(
        text="Capital? AUDIT:333 VERIFY:2", choices=CHOICES, answer="Seoul"
    )
    question_set, _ = question_sets.add("checked", [flagged.pk, disputed.pk])
    StudyQuestionSet.objects.filter(pk=question_set.pk).update(owner_email="teacher@example.org")
    pause(JobKind.VERIFICATION)
    call_command("enqueue", "--set", "checked", stdout=StringIO(), stderr=StringIO())
    _drain()
    progress = question_sets.progress(question_set)
    assert (progress.explained, progress.flagged, progress.waiting) == (2, 0, 0)
    assert (progress.checking, progress.verified, progress.done) == (2, 0, False)
    assert (progress.key_audited, progress.key_disputed) == (2, 1)
    assert receiver.posts == [] and signals == [] and mail.outbox == []
    assert not StudyQuestionJob.objects.filter(kind=JobKind.SET_NOTICE).exists()

    resume(JobKind.VERIFICATION)
    _drain()
    assert len(receiver.posts) == 1 and len(signals) == 1
    data = json.loads(receiver.posts[0][1])
    counts = ("completed", "flagged", "key_audited", "key_disputed", "verified", "verifier_flagged")
    assert {k: data[k] for k in counts} == {
        "completed": 2,
        "flagged": 1,
        "key_audited": 2,
        "key_disputed": 1,
        "verified": 2,
        "verifier_flagged": 1,
    }
    checked = StudyQuestionJob.objects.filter(kind=JobKind.VERIFICATION).order_by("-completed_at")
    assert data["finished_at"] == checked[0].completed_at.isoformat()  # its last check's end
    assert signals[0]["payload"] == data
    [message] = mail.outbox
    assert "checked: 2 of 2 explained (0 approved, 1 flagged), 0 failed, 0 waiting" in message.body
    assert "checks: 2 keys audited (1 disputed), 2 explanations verified (1 flagged by the " in (
        message.body
    )
    _drain()  # nothing new: no second notice
    assert len(receiver.posts) == 1 and len(signals) == 1 and len(mail.outbox) == 1


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_receiver_that_refuses_every_notice_gets_one_job_and_max_attempts_posts(
    receiver, signals, settings, child_env, python, max_attempts
):
    """One completion, one notice job: retried up to MAX_ATTEMPTS, then it gives up, and
    the sweep does not queue the same completion again; the drain returns."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": max_attempts}
    receiver.otherwise = 400
    question_set = _set("refused", 2, owner_email="teacher@example.org")
    took = _drain_process(child_env, python, settings)
    _drain_process(child_env, python, settings)  # a later drain finds nothing to notice either
    assert len(receiver.posts) == max_attempts
    assert len({headers["Idempotency-Key"] for headers, _ in receiver.posts}) == 1
    [notice] = question_set.jobs.filter(kind=JobKind.SET_NOTICE)
    assert (notice.status, notice.attempts) == (JobStatus.FAILED, max_attempts)
    assert signals == [] and mail.outbox == []
    assert took < 30


def test_a_receiver_that_is_down_gets_one_job(receiver, settings, child_env, python):
    """Nothing listens at the URL: connection refused, retried, given up, not queued again."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "MAX_ATTEMPTS": 2,
        "WEBHOOK_URL": f"http://127.0.0.1:{ports.free_port()}/down",
    }
    question_set = _set("down", 1)
    _drain_process(child_env, python, settings)
    _drain_process(child_env, python, settings)
    [notice] = question_set.jobs.filter(kind=JobKind.SET_NOTICE)
    assert (notice.status, notice.attempts) == (JobStatus.FAILED, 2)
    assert receiver.posts == []


def _regenerate(question_set: StudyQuestionSet) -> None:
    """Queue the explanation of one of the set's (explained) questions again, as a
    reviewer's reject or ``enqueue --outdated`` does."""
    first = question_sets.questions(question_set).order_by("pk").first()
    assert first is not None and first.explanation
    call_command("enqueue", "--question", str(first.pk), stdout=StringIO(), stderr=StringIO())


def test_a_regeneration_in_a_noticed_set_sends_no_second_notice(receiver, signals):
    """Same questions, same completion: one POST, one signal, one e-mail."""
    question_set = _set("regenerated", 2, owner_email="teacher@example.org")
    _drain()
    _regenerate(question_set)
    _drain()
    assert StudyQuestionJob.objects.filter(kind=JobKind.EXPLANATION).count() == 3
    assert len(receiver.posts) == 1 and len(signals) == 1 and len(mail.outbox) == 1
    assert question_set.jobs.filter(kind=JobKind.SET_NOTICE).count() == 1


def test_a_check_queued_before_the_notice_ran_still_sends_one(receiver, signals):
    """The set is done, its notice queued, then a check of one of its questions: the notice
    is skipped (not done) and the set noticed once, when the check ended."""
    question_set = _set("rechecked", 1)
    pause(JobKind.SET_NOTICE)
    _drain()
    assert question_set.jobs.filter(kind=JobKind.SET_NOTICE, status=JobStatus.PENDING).exists()
    pause(JobKind.VERIFICATION)
    enqueue(question_sets.questions(question_set).get(), JobKind.VERIFICATION)
    resume(JobKind.SET_NOTICE)
    _drain()  # the notice runs while the check waits
    assert receiver.posts == [] and signals == []
    resume(JobKind.VERIFICATION)
    _drain()
    assert len(receiver.posts) == 1 and len(signals) == 1
    statuses = sorted(question_set.jobs.values_list("status", flat=True))
    assert statuses == [JobStatus.COMPLETED, JobStatus.SKIPPED]


def test_a_set_that_grows_gets_a_new_key_and_each_completion_one(receiver, signals):
    question_set = _set("growing", 1)
    _drain()
    explained = StudyQuestionFactory(text="growing: explained elsewhere", explanation="Four.")
    question_sets.add("growing", [explained.pk])  # already explained: done again at once
    _drain()
    _regenerate(question_set)
    _drain()
    assert len(receiver.posts) == 2 and len(signals) == 2
    first, second = (headers["Idempotency-Key"] for headers, _ in receiver.posts)
    assert first != second
    assert [s["payload"]["total"] for s in signals] == [1, 2]


def test_a_receiver_that_drips_its_answer_fails_the_attempt_at_the_deadline(
    receiver, signals, settings, child_env, python
):
    """Headers, then a byte every 0.5 s (each read within httpx's timeout): the notice's
    whole delivery is bounded by WEBHOOK_TIMEOUT_SECONDS; each attempt fails at it, and
    the job gives up after MAX_ATTEMPTS. An explanation queued beside it is written."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "MAX_ATTEMPTS": 2,
        "WEBHOOK_TIMEOUT_SECONDS": 1.5,
    }
    receiver.drip = True
    question_set = _set("dripped", 1)
    took = _drain_process(child_env, python, settings, seconds=40)
    assert len(receiver.posts) == 2
    assert took < 20  # two attempts of 1.5 s, and the process's start and stop
    [notice] = question_set.jobs.filter(kind=JobKind.SET_NOTICE)
    assert (notice.status, notice.attempts) == (JobStatus.FAILED, 2)
    assert notice.error_code == "webhook_failed"
    assert "no complete answer within 1.5 s" in notice.error_message
    assert signals == []


def test_a_stuck_notice_ends_at_its_deadline_beside_an_explanation(receiver, settings):
    """A dripping notice and an explanation in one drain: the notice holds its batch slot
    only until its deadline (no gate slot at all), the explanation is written, and the
    drain returns."""
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "MAX_ATTEMPTS": 1, "WEBHOOK_TIMEOUT_SECONDS": 2}
    receiver.drip = True
    _set("stuck", 1)
    later = StudyQuestionFactory(text="asked while the notice drips")
    enqueue(later)
    started = time.monotonic()
    _drain()
    assert time.monotonic() - started < 15
    later.refresh_from_db()
    assert later.explanation
    assert len(receiver.posts) == 1


def test_a_second_notice_job_of_a_noticed_completion_sends_nothing(receiver, signals):
    """A second consumer's sweep that read the set before the first notice was recorded
    queues another notice job of the same completion: it re-checks and sends nothing."""
    question_set = _set("raced", 1, owner_email="teacher@example.org")
    _drain()
    enqueue_for_set(question_set.pk, JobKind.SET_NOTICE)  # what the stale sweep would queue
    _drain()
    assert len(receiver.posts) == 1 and len(signals) == 1 and len(mail.outbox) == 1
    statuses = sorted(question_set.jobs.values_list("status", "error_code"))
    assert statuses == [(JobStatus.COMPLETED, ""), (JobStatus.SKIPPED, "set_noticed")]


@pytest.mark.postgres
def test_two_consumers_racing_send_each_completion_exactly_once(receiver, signals, make_consumer):
    """Two consumers, each in its own thread with its own database connections, released
    together on a dozen done sets: each set gets one notice job, one POST, one signal and
    one e-mail."""
    names = [f"race {i}" for i in range(12)]
    for name in names:
        question = StudyQuestionFactory(text=f"{name}: 2 + 2?", explanation="Four.")
        StudyQuestionJobFactory(
            study_question=question, status=JobStatus.COMPLETED, completed_at=question.created_at
        )
        question_sets.add(name, [question.pk])
        StudyQuestionSet.objects.filter(name=name).update(owner_email=f"{name}@example.org")
    consumers = [make_consumer(worker_id=f"racer-{i}", batch_size=4) for i in range(2)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def race(consumer) -> None:
        try:
            start.wait(timeout=10)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                result = consumer.run_cycle()
                if (
                    not result.claimed
                    and not StudyQuestionJob.objects.filter(
                        kind=JobKind.SET_NOTICE,
                        status__in=(JobStatus.PENDING, JobStatus.PROCESSING),
                    ).exists()
                ):
                    return
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    posted = sorted(json.loads(body)["set"] for _, body in receiver.posts)
    assert posted == sorted(names)
    assert sorted(s["payload"]["set"] for s in signals) == sorted(names)
    assert sorted(m.to[0] for m in mail.outbox) == sorted(f"{n}@example.org" for n in names)
    sent = StudyQuestionJob.objects.filter(kind=JobKind.SET_NOTICE, status=JobStatus.COMPLETED)
    assert sent.count() == len(names)


TOKEN = "xoxWebhookToken1234"


@pytest.mark.parametrize("down", [False, True])
def test_a_webhook_urls_path_token_never_shows_in_the_error_or_the_log(
    receiver, settings, caplog, down
):
    """A Slack-style URL's path is its credential: the notice's error (the admin shows
    it) and every log line, httpx's included, show the host and ``[redacted]``."""
    port = ports.free_port() if down else receiver.httpd.server_address[1]
    url = f"http://127.0.0.1:{port}/services/T0ABC/B0DEF/{TOKEN}"
    settings.STUDYQUEUE = {**settings.STUDYQUEUE, "WEBHOOK_URL": url, "MAX_ATTEMPTS": 1}
    receiver.otherwise = 400
    caplog.set_level("DEBUG")
    question_set = _set("secret", 1)
    _drain()
    [notice] = question_set.jobs.filter(kind=JobKind.SET_NOTICE)
    assert notice.status == JobStatus.FAILED
    assert notice.error_message.startswith(f"POST http://127.0.0.1:{port}/[redacted]")
    assert TOKEN not in notice.error_message and "T0ABC" not in notice.error_message
    assert TOKEN not in caplog.text and "B0DEF" not in caplog.text
    if not down:
        assert receiver.posts and "HTTP Request: POST" in caplog.text  # httpx did log it


def test_a_dripping_notice_holds_no_gate_slot(receiver, settings, make_consumer):
    """One gate slot, a batch of two: a notice dripping toward its deadline and an
    explanation claimed together. The explanation is written while the notice still runs."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "MAX_ATTEMPTS": 1,
        "WEBHOOK_TIMEOUT_SECONDS": 8,
        "GATE_PERMITS": 1,
    }
    receiver.drip = True
    done = StudyQuestionFactory(explanation="Four.")
    StudyQuestionJobFactory(
        study_question=done, status=JobStatus.COMPLETED, completed_at=done.created_at
    )
    question_set, _ = question_sets.add("gated", [done.pk])
    assert notices.queue_due_notices() == 1
    later = StudyQuestionFactory(text="asked while the notice drips")
    enqueue(later)
    consumer = make_consumer(batch_size=2)
    cycle = threading.Thread(target=consumer.run_cycle)
    started = time.monotonic()
    cycle.start()
    try:
        notice = question_set.jobs.get(kind=JobKind.SET_NOTICE)
        wait_for(lambda: receiver.posts, timeout=10, what="the notice's POST")
        wait_for(
            lambda: StudyQuestion.objects.filter(pk=later.pk).exclude(explanation="").exists(),
            timeout=10,
            what="the explanation written beside the dripping notice",
        )
        notice.refresh_from_db()
        assert notice.status == JobStatus.PROCESSING  # still dripping: it held no gate slot
    finally:
        cycle.join(30)
    notice.refresh_from_db()
    assert (notice.status, notice.error_code) == (JobStatus.FAILED, "webhook_failed")
    assert 7 < time.monotonic() - started < 20  # the notice ended at its deadline


def test_dripping_notices_never_take_the_places_explanations_need(
    receiver, settings, make_consumer
):
    """A gate-1 consumer (two places in flight) delivers two set notices to a receiver that
    sends a byte every 2 s; five explanations queued meanwhile are all written while both
    notices still drip: a delivery takes none of the places the LLM's jobs need."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "MAX_ATTEMPTS": 1,
        "WEBHOOK_TIMEOUT_SECONDS": 12,
        "GATE_PERMITS": 1,
    }
    receiver.drip, receiver.drip_every = True, 2.0
    for name in ("slow 1", "slow 2"):
        _explained(name, f"{name}: 2 + 2?")
    assert notices.queue_due_notices() == 2
    consumer = make_consumer()
    cycle = threading.Thread(target=consumer.run_cycle)
    cycle.start()
    try:
        wait_for(lambda: len(receiver.posts) == 2, timeout=10, what="both notices' POSTs")
        later = [StudyQuestionFactory(text=f"asked while notices drip: {n}?") for n in range(5)]
        enqueue_many([q.pk for q in later])
        wait_for(
            lambda: (
                StudyQuestion.objects.filter(pk__in=[q.pk for q in later])
                .exclude(explanation="")
                .count()
                == 5
            ),
            timeout=10,
            what="the five explanations written beside the dripping notices",
        )
        delivering = StudyQuestionJob.objects.filter(kind=JobKind.SET_NOTICE)
        assert list(delivering.values_list("status", flat=True)) == [JobStatus.PROCESSING] * 2
    finally:
        cycle.join(60)
    assert not cycle.is_alive()
