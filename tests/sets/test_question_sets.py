"""Question sets (``sets/question_sets.py``, ``sets/eta.py``, ``sets/notices.py``):
importing a file as a set, a question in several sets, each state counted,
``enqueue``/``exportexplanations`` ``--set``, ``setstatus`` in words and JSON, the estimate
and its basis, a whole set imported, drained by ``runconsumer`` and reported done, and a set
done only once its checks ended (a question held for its reviewer waiting as before)."""

from __future__ import annotations

import json
import unicodedata
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from studyqueue.explanations import key_audit
from studyqueue.models import (
    JobKind,
    JobStatus,
    ReviewStatus,
    StudyQuestion,
    StudyQuestionJob,
    StudyQuestionSet,
)
from studyqueue.queue import transitions
from studyqueue.queue.enqueue import enqueue, enqueue_many
from studyqueue.queue.pauses import pause, resume
from studyqueue.sets import eta, question_sets
from tests.factories import (
    ExplanationRevisionFactory,
    StudyQuestionFactory,
    StudyQuestionJobFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _file(tmp_path: Path, n: int, start: int = 0) -> str:
    path = tmp_path / f"set-{start}.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"external_id": f"q{i}", "text": f"What is {i} + {i}?"})
            for i in range(start, start + n)
        )
    )
    return str(path)


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_file_imported_as_a_set_and_a_question_in_two_sets(tmp_path):
    out = _run("importquestions", _file(tmp_path, 5), "--set", "midterm")
    assert "Question set 'midterm': 5 question(s) added, 5 in all." in out
    # Again, and a later file overlapping it: nothing twice, the shared ones in both sets.
    assert "0 question(s) added, 5 in all" in _run(
        "importquestions", _file(tmp_path, 5), "--set", "midterm"
    )
    _run("importquestions", _file(tmp_path, 4, start=3), "--set", "final")
    final = StudyQuestionSet.objects.get(name="final")
    assert question_sets.questions(final).count() == 4
    shared = StudyQuestion.objects.get(external_id="q3")
    assert sorted(shared.sets.values_list("name", flat=True)) == ["final", "midterm"]


def test_a_deadline_is_local_time_and_needs_a_set(tmp_path, settings):
    settings.TIME_ZONE = "Asia/Seoul"
    _run("importquestions", _file(tmp_path, 1), "--set", "s", "--deadline", "2036-12-02 07:00")
    deadline = StudyQuestionSet.objects.get(name="s").deadline
    assert deadline is not None and deadline.isoformat() == "2036-12-01T22:00:00+00:00"
    with pytest.raises(CommandError, match="--deadline goes with --set"):
        call_command("importquestions", _file(tmp_path, 1), "--deadline", "2026-12-02 07:00")
    with pytest.raises(CommandError, match="expected a date and time"):
        call_command("importquestions", _file(tmp_path, 1), "--set", "s", "--deadline", "7am")


def _set_of_every_state() -> StudyQuestionSet:
    """Seven questions: 1 approved, 2 plainly explained, 1 flagged, 1 failed (its last job
    failed, none active), 2 waiting (one queued, one whose failed job is being retried)."""

    def explained(flags: list[str] | None = None, review: str = ReviewStatus.UNREVIEWED):
        question = StudyQuestionFactory(explanation="Four.", explanation_flags=flags or [])
        revision = ExplanationRevisionFactory(question=question, review_status=review)
        StudyQuestion.objects.filter(pk=question.pk).update(current_revision=revision)
        return question

    members = [
        explained(review=ReviewStatus.APPROVED),
        explained(),
        explained(),
        explained(flags=["too_short"]),
    ]
    failed = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=failed, status=JobStatus.FAILED)
    queued = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=queued)
    retried = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=retried, status=JobStatus.FAILED)
    StudyQuestionJobFactory(study_question=retried)
    question_set, _ = question_sets.add("all", [q.pk for q in [*members, failed, queued, retried]])
    StudyQuestionFactory()  # not in the set
    return question_set


def test_each_state_is_counted_once():
    question_set = _set_of_every_state()
    progress = question_sets.progress(question_set)
    assert (progress.total, progress.explained, progress.approved, progress.flagged) == (7, 4, 1, 1)
    assert (progress.plain, progress.failed, progress.waiting, progress.done) == (2, 1, 2, False)
    assert progress.checking == 0


def test_a_check_is_running_while_it_can_still_be_claimed():
    """Processing, or pending with attempts left; a pending one whose attempts are used up
    will never run, and an ended one is over: neither holds the set."""
    explained = [StudyQuestionFactory(explanation="Four.") for _ in range(4)]
    question_set, _ = question_sets.add("checks", [q.pk for q in explained])
    running, pending, exhausted, ended = explained
    StudyQuestionJobFactory(
        study_question=running, kind=JobKind.KEY_AUDIT, status=JobStatus.PROCESSING
    )
    StudyQuestionJobFactory(study_question=pending, kind=JobKind.VERIFICATION)
    StudyQuestionJobFactory(
        study_question=exhausted, kind=JobKind.VERIFICATION, attempts=3, max_attempts=3
    )
    StudyQuestionJobFactory(
        study_question=ended, kind=JobKind.VERIFICATION, status=JobStatus.FAILED
    )
    progress = question_sets.progress(question_set)
    assert (progress.waiting, progress.checking, progress.done) == (0, 2, False)
    assert progress.finished_at is None


def test_setstatus_in_words_and_json_and_an_unknown_set():
    _set_of_every_state()
    text = _run("setstatus", "all")
    assert text.startswith(
        "all: 4 of 7 explained (1 approved, 1 flagged), 1 failed, 2 waiting\n"
        "not started yet; no estimate yet"
    )
    data = json.loads(_run("setstatus", "all", "--json"))
    assert {k: data[k] for k in ("name", "total", "completed", "failed", "waiting", "done")} == {
        "name": "all",
        "total": 7,
        "completed": 4,
        "failed": 1,
        "waiting": 2,
        "done": False,
    }
    assert data["eta_seconds"] is None and data["deadline"] is None
    with pytest.raises(CommandError, match=r"no question set named 'nope' \(sets: all\)"):
        call_command("setstatus", "nope")


def test_enqueue_and_export_take_only_the_sets_questions(tmp_path):
    _run("importquestions", _file(tmp_path, 3), "--set", "a")
    _run("importquestions", _file(tmp_path, 2, start=10), "--set", "b")
    assert "Created 3 explanation job(s)" in _run("enqueue", "--set", "a")
    queued = StudyQuestionJob.objects.values_list("study_question__external_id", flat=True)
    assert sorted(queued) == ["q0", "q1", "q2"]
    with pytest.raises(CommandError, match="no question set named 'c'"):
        call_command("enqueue", "--set", "c")
    out = _run("exportexplanations", "--set", "b", "--include-missing")
    assert sorted(json.loads(line)["external_id"] for line in out.splitlines()) == ["q10", "q11"]


def _completed(
    now: datetime, started: timedelta, ended: timedelta, tokens: int | None = 100
) -> None:
    """An explanation job of ``tokens`` tokens, started and ended that long before ``now``
    (one instant for all of a test's jobs and its estimate: a loaded machine takes a while
    to make each, which moved the measured pace)."""
    question = StudyQuestionFactory()
    revision = ExplanationRevisionFactory(question=question, completion_tokens=tokens)
    StudyQuestionJobFactory(
        study_question=question,
        status=JobStatus.COMPLETED,
        started_at=now - started,
        completed_at=now - ended,
        revision=revision,
    )


def test_the_estimate_is_the_pace_since_the_first_completion():
    """Three explanations of 100 tokens completed 20, 10 and 0 s ago (the first started 30 s
    ago): two jobs in the 20 s since the first, 10 tok/s, so 6 more take a minute. An
    hour-old job is outside the window."""
    now = timezone.now()
    _completed(now, timedelta(seconds=30), timedelta(seconds=20))
    _completed(now, timedelta(seconds=15), timedelta(seconds=10))
    _completed(now, timedelta(seconds=5), timedelta(0))
    _completed(now, timedelta(hours=1, seconds=5), timedelta(hours=1))
    rate = eta.Rate.of(now)
    assert rate is not None and (rate.jobs, rate.tokens_per_job) == (3, 100)
    assert rate.tokens_per_second == pytest.approx(10.0, rel=0.02)
    assert rate.seconds_for(6) == pytest.approx(60.0, rel=0.02)
    assert rate.basis == "at 10 tok/s over the last 30 s (3 jobs)"


def test_right_after_a_start_the_estimate_is_the_calls_in_flight_over_their_time():
    """One completion so far, 4 s from claim to end, and two jobs in flight: Little's law
    gives half a job a second (50 tok/s), where counting the one completion over the time
    since the first start would give 25."""
    now = timezone.now()
    _completed(now, timedelta(seconds=4), timedelta(0))
    StudyQuestionJobFactory.create_batch(2, status=JobStatus.PROCESSING)
    rate = eta.Rate.of(now)
    assert rate is not None and rate.tokens_per_second == pytest.approx(50.0, rel=0.05)


def test_a_set_imported_and_drained_is_done(tmp_path, llm_server, settings):
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
    }
    _run("importquestions", _file(tmp_path, 6), "--set", "quiz", "--enqueue")
    call_command("runconsumer", "--drain", stdout=StringIO(), stderr=StringIO())
    data = json.loads(_run("setstatus", "quiz", "--json"))
    assert (data["total"], data["completed"], data["waiting"], data["done"]) == (6, 6, 0, True)
    assert data["started_at"] and data["finished_at"]
    assert "6 of 6 explained" in _run("setstatus", "quiz")


def test_a_set_is_done_once_its_checks_ended_and_a_held_question_waits_for_its_reviewer(
    llm_server, settings
):
    """Verification paused: the agreed question is explained, its check queued; the disputed
    one is held for its reviewer (waiting, as before: its ended audit is no running check).
    Kept, it is explained too: nothing waits, two checks run, not done. The checks run:
    done, when the last of them ended, with their counts."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "KEY_AUDIT": True,
        "KEY_AUDIT_HOLDS": True,
        "VERIFY": True,
    }
    llm_server.answer = "Seoul has been the capital since 1394.\n정답: ②"
    choices = ["Busan", "Seoul", "Incheon"]
    agreed = StudyQuestionFactory(
        text="Capital? AUDIT:222 VERIFY:3", choices=choices, answer="Seoul"
    )
    held = StudyQuestionFactory(text="Capital? AUDIT:333 VERIFY:2", choices=choices, answer="Seoul")
    question_sets.add("checked", [agreed.pk, held.pk])
    pause(JobKind.VERIFICATION)
    _run("enqueue", "--set", "checked")
    _run("runconsumer", "--drain")
    data = json.loads(_run("setstatus", "checked", "--json"))
    assert {k: data[k] for k in ("completed", "waiting", "checking", "done")} == {
        "completed": 1,
        "waiting": 1,
        "checking": 1,
        "done": False,
    }
    assert key_audit.decide_key(held, take_model_choice=False, by="reviewer")
    _run("runconsumer", "--drain")
    text = _run("setstatus", "checked")
    assert "every explanation ended; checks still running on 2 question(s)" in text
    assert "checks: 2 keys audited (1 disputed), 0 explanations verified (0 flagged" in text
    data = json.loads(_run("setstatus", "checked", "--json"))
    state = {k: data[k] for k in ("waiting", "checking", "done", "finished_at")}
    assert state == {"waiting": 0, "checking": 2, "done": False, "finished_at": None}
    resume(JobKind.VERIFICATION)
    _run("runconsumer", "--drain")
    data = json.loads(_run("setstatus", "checked", "--json"))
    counts = ("done", "checking", "flagged", "key_disputed", "verified", "verifier_flagged")
    assert {k: data[k] for k in counts} == {
        "done": True,
        "checking": 0,
        "flagged": 1,
        "key_disputed": 1,
        "verified": 2,
        "verifier_flagged": 1,
    }
    checks = StudyQuestionJob.objects.filter(kind=JobKind.VERIFICATION).order_by("-completed_at")
    assert data["finished_at"] == checks[0].completed_at.isoformat()


def _claimed_in_order(n: int) -> list[str]:
    jobs = [transitions.claim(worker_id="w", limit=1) for _ in range(n)]
    return [StudyQuestion.objects.get(pk=job.study_question_id).text for [job] in jobs]


@pytest.mark.parametrize("bulk", [False, True])
def test_a_set_with_a_deadline_is_claimed_first_the_earliest_first_then_by_age(bulk):
    now = timezone.now()
    plain, later, sooner = (StudyQuestionFactory(text=t) for t in ("plain", "later", "sooner"))
    question_sets.add("later", [later.pk], deadline=now + timedelta(hours=2))
    question_sets.add("sooner", [sooner.pk], deadline=now + timedelta(hours=1))
    ids = [plain.pk, later.pk, sooner.pk]  # enqueued oldest first
    if bulk:
        enqueue_many(ids)
    else:
        for pk in ids:
            enqueue(pk)
    assert _claimed_in_order(3) == ["sooner", "later", "plain"]


def test_a_deadline_moved_forward_moves_its_queued_jobs_forward():
    now = timezone.now()
    first, second = StudyQuestionFactory(text="first"), StudyQuestionFactory(text="second")
    question_sets.add("a", [first.pk], deadline=now + timedelta(hours=1))
    enqueue_many([first.pk, second.pk])
    question_sets.add("b", [second.pk], deadline=now + timedelta(minutes=10))  # joins a set
    assert _claimed_in_order(2) == ["second", "first"]


def test_the_dashboard_and_setstatus_say_a_set_will_be_late(admin_client):
    """Two explanations of 100 tokens a second apart: 100 tok/s; 600 questions wait, so the
    set needs about 10 min, and its deadline is in 5."""
    now = timezone.now()
    for ended in (2, 1):
        question = StudyQuestionFactory()
        revision = ExplanationRevisionFactory(question=question, completion_tokens=100)
        StudyQuestionJobFactory(
            study_question=question,
            status=JobStatus.COMPLETED,
            started_at=now - timedelta(seconds=3),
            completed_at=now - timedelta(seconds=ended),
            revision=revision,
        )
    waiting = StudyQuestion.objects.bulk_create(StudyQuestion(text=f"q{i}") for i in range(600))
    question_sets.add("finals", [q.pk for q in waiting], deadline=now + timedelta(minutes=5))
    text = _run("setstatus", "finals")
    assert "deadline " in text and "late at the current rate" in text
    html = admin_client.get("/admin/studyqueue/queuedashboard/").content.decode()
    alert = html.split('class="sq-alert sq-late-set" data-set="finals"')[1].split("</div>")[0]
    assert "finals will miss its deadline" in alert and "late." in alert


@pytest.mark.parametrize(
    ("due", "verdict", "alert"),
    [
        (-timedelta(minutes=5), "already 5m late, not done yet", "missed its deadline"),
        (
            timedelta(minutes=30, seconds=30),
            "at risk: due in 30m and no estimate",
            "may miss its deadline",
        ),
        (timedelta(hours=3), "no estimate yet", None),
    ],
)
def test_with_no_estimate_a_past_or_near_deadline_is_still_warned_about(
    admin_client, due, verdict, alert
):
    """The servers stalled: nothing completed in the window, so there is no estimate. A
    deadline already passed is late anyway, one within the hour is at risk; one hours away
    is not warned about."""
    waiting = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=waiting)
    deadline = timezone.now() + due
    question_sets.add("stalled", [waiting.pk], deadline=deadline)
    text = _run("setstatus", "stalled")
    assert "no estimate yet: no explanation completed in the last 10 min" in text
    assert f": {verdict}" in text.splitlines()[-1]
    html = admin_client.get("/admin/studyqueue/queuedashboard/").content.decode()
    if alert is None:
        assert 'data-set="stalled"' not in html
        return
    shown = html.split('class="sq-alert sq-late-set" data-set="stalled"')[1].split("</div>")[0]
    assert f"stalled {alert}" in shown
    assert "no explanation completed in the last 10 min" in shown


def test_without_token_counts_the_estimate_is_by_jobs_and_says_so():
    """A server that streams without a usage chunk: the same three jobs as above, no tokens
    reported. Two jobs in 20 s, six more take a minute, at 6 jobs/min; one job in the window
    with a count among others without would count those as free: by jobs too."""
    now = timezone.now()
    _completed(now, timedelta(seconds=30), timedelta(seconds=20), tokens=None)
    _completed(now, timedelta(seconds=15), timedelta(seconds=10), tokens=None)
    _completed(now, timedelta(seconds=5), timedelta(0))
    rate = eta.Rate.of(now)
    assert rate is not None and rate.jobs == 3 and rate.tokens_per_second is None
    assert rate.seconds_for(6) == pytest.approx(60.0, rel=0.02)
    assert rate.basis == "at 6.0 jobs/min over the last 30 s (3 jobs; no token counts reported)"
    waiting = StudyQuestionFactory()
    question_sets.add("untokened", [waiting.pk])
    text = _run("setstatus", "untokened")
    assert "finishes about" in text and "jobs/min" in text
    assert "no explanation completed" not in text


def test_a_sets_name_is_spelled_one_way_at_every_entry_point(tmp_path):
    """Stripped and NFC at import, lookup and add alike (a Korean name in NFD is the same
    set); a line break, a control character or a name longer than the column is refused
    with the reason, nothing imported, never cut to fit (two exams would merge)."""
    nfc = "2026 중간고사"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    _run("importquestions", _file(tmp_path, 2), "--set", f"  {nfd} ")
    assert list(StudyQuestionSet.objects.values_list("name", flat=True)) == [nfc]
    assert "1 question(s) added, 3 in all" in _run(
        "importquestions", _file(tmp_path, 1, start=5), "--set", nfc
    )
    question_set, added = question_sets.add(f"{nfd}\t", [StudyQuestionFactory().pk])
    assert (question_set.name, added) == (nfc, 1)
    assert f"{nfc}: 0 of 4 explained" in _run("setstatus", f" {nfd} ")
    assert "Created 4 explanation job(s)" in _run("enqueue", "--set", nfd)
    assert len(_run("exportexplanations", "--set", nfd).splitlines()) == 0  # none explained yet
    for bad, reason in [
        ("midterm\nA", r"line break or control character \(U\+000A at character 8\)"),
        ("mid\x00term", r"U\+0000 at character 4"),
        ("x" * 201, "at most 200 characters; this one has 201"),
        ("   ", "needs a name"),
    ]:
        with pytest.raises(CommandError, match=f"--set: .*{reason}"):
            call_command("importquestions", _file(tmp_path, 1, start=9), "--set", bad)
        for command in (
            ["setstatus", bad],
            ["enqueue", "--set", bad],
            ["exportexplanations", "--set", bad],
        ):
            with pytest.raises(CommandError, match=reason):
                call_command(*command)
        with pytest.raises(question_sets.BadSetName, match=reason):
            question_sets.add(bad, [])
    assert not StudyQuestion.objects.filter(external_id="q9").exists()
    assert StudyQuestionSet.objects.count() == 1
    # A name of exactly the column's width is fine, in Korean too.
    assert question_sets.add("가" * 200, [])[0].name == "가" * 200


def test_an_emptied_set_is_empty_not_waiting(tmp_path, admin_client):
    """Its questions deleted: not done (nothing to notice), nothing waiting, no warning for
    its passed deadline, and a status line that says so. An import
    whose every row is invalid leaves the set alone rather than make an empty one."""
    _run("importquestions", _file(tmp_path, 2), "--set", "gone")
    question_set = StudyQuestionSet.objects.get(name="gone")
    question_set.deadline = timezone.now() - timedelta(minutes=5)
    question_set.save()
    question_sets.questions(question_set).delete()
    progress = question_sets.progress(question_set)
    assert (progress.empty, progress.done, progress.waiting, progress.at_risk) == (
        True,
        False,
        0,
        False,
    )
    text = _run("setstatus", "gone")
    assert "empty: it has no questions, so nothing is waiting" in text
    assert text.splitlines()[-1].endswith(": nothing to do, the set is empty")
    data = json.loads(_run("setstatus", "gone", "--json"))
    assert (data["total"], data["empty"], data["done"]) == (0, True, False)
    html = admin_client.get("/admin/studyqueue/queuedashboard/").content.decode()
    assert 'data-set="gone"' not in html
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": ""}\n{"nope": 1}\n')
    err = StringIO()
    call_command(
        "importquestions",
        str(bad),
        "--set",
        "never",
        "--skip-invalid",
        stdout=StringIO(),
        stderr=err,
    )
    assert "no valid row: question set 'never' not created or changed" in err.getvalue()
    assert not StudyQuestionSet.objects.filter(name="never").exists()


@pytest.mark.parametrize("when", ["0001-01-01 03:00", "9999-12-31 23:00-05:00", "9999-12-31 23:00"])
def test_a_deadline_out_of_range_is_refused_with_a_clear_error(tmp_path, settings, when):
    """Year 1 east of UTC and year 9999 west of it are no date Python can hold in UTC; the
    last day of 9999 would be none in a zone ahead of it. Nothing imported."""
    settings.TIME_ZONE = "Asia/Seoul"
    with pytest.raises(CommandError, match="out of range: too far in the past or the future"):
        call_command("importquestions", _file(tmp_path, 1), "--set", "s", "--deadline", when)
    assert not StudyQuestion.objects.exists() and not StudyQuestionSet.objects.exists()


def test_a_deadline_in_the_past_is_refused_at_import(tmp_path, settings):
    settings.TIME_ZONE = "Asia/Seoul"
    with pytest.raises(CommandError, match=r"--deadline .* is in the past \(it is now .*nothing"):
        call_command(
            "importquestions", _file(tmp_path, 1), "--set", "s", "--deadline", "2001-01-01 07:00"
        )
    assert not StudyQuestion.objects.exists() and not StudyQuestionSet.objects.exists()
