"""The operator's admin through the test client: actions, permissions, CSRF, dashboard, escaping."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from studyqueue.admin import STATUS_COLOURS
from studyqueue.models import JobStatus, StudyQuestion, StudyQuestionJob
from studyqueue.stats import collect
from tests.factories import StudyQuestionFactory, StudyQuestionJobFactory

pytestmark = pytest.mark.django_db

JOBS_URL = reverse("admin:studyqueue_studyquestionjob_changelist")
RESET_URL = reverse("admin:studyqueue_studyquestionjob_reset_stale")
DASHBOARD_URL = reverse("admin:studyqueue_queuedashboard_changelist")
QUESTIONS_URL = reverse("admin:studyqueue_studyquestion_changelist")


def one_of_each() -> dict[str, StudyQuestionJob]:
    """A job in every status; the processing one is stale."""
    jobs = {status: StudyQuestionJobFactory(status=status) for status in JobStatus.values}
    StudyQuestionJob.objects.filter(pk=jobs["processing"].pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1), started_at=timezone.now()
    )
    return jobs


def act(client: Client, action: str, jobs) -> list[str]:
    response = client.post(
        JOBS_URL,
        {"action": action, "_selected_action": [j.pk for j in jobs]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


def statuses(jobs: dict[str, StudyQuestionJob]) -> dict[str, str]:
    return {k: StudyQuestionJob.objects.get(pk=j.pk).status for k, j in jobs.items()}


def staff(*perms: str) -> Client:
    user = User.objects.create_user("op", password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


# --------------------------------------------------------------------------- list and detail


def test_every_status_has_a_badge():
    assert set(STATUS_COLOURS) == set(JobStatus)


def test_changelist_shows_columns_without_n_plus_one(admin_client, django_assert_max_num_queries):
    one_of_each()
    response = admin_client.get(JOBS_URL)
    assert response.status_code == 200
    html = response.content.decode()
    for label in ("Pending", "Processing", "Completed", "Failed", "Skipped", "0 / 3", "waiting "):
        assert label in html
    StudyQuestionJobFactory.create_batch(40, status="completed", llm_ms=1500)
    with django_assert_max_num_queries(12):
        assert admin_client.get(JOBS_URL).status_code == 200
    assert "1.5s" in admin_client.get(JOBS_URL).content.decode()


@pytest.mark.parametrize(
    "query,expected",
    [
        ("status=failed", {"failed"}),
        ("kind=explanation&status=pending", {"pending"}),
        ("stale=yes", {"processing"}),
        ("error_code=llm_timeout", {"failed"}),
    ],
)
def test_filters(admin_client, query, expected):
    jobs = one_of_each()
    StudyQuestionJob.objects.filter(pk=jobs["failed"].pk).update(error_code="llm_timeout")
    response = admin_client.get(f"{JOBS_URL}?{query}")
    shown = {job.status for job in response.context["cl"].result_list}
    assert shown == expected


def test_created_date_filter_and_search(admin_client):
    old = StudyQuestionJobFactory(study_question__text="ancient question")
    StudyQuestionJob.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(days=40)
    )
    new = StudyQuestionJobFactory(study_question__text="fresh question", error_message="boom")
    # The "Past 7 days" link of the admin's date filter.
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    since = str(midnight - timedelta(days=7))
    response = admin_client.get(JOBS_URL, {"created_at__gte": since})
    assert [j.pk for j in response.context["cl"].result_list] == [new.pk]
    for term, pk in (("ancient", old.pk), ("boom", new.pk), (str(old.pk), old.pk)):
        response = admin_client.get(f"{JOBS_URL}?q={term}")
        assert [j.pk for j in response.context["cl"].result_list] == [pk], term


def test_detail_page_is_read_only_and_escaped(admin_client):
    job = StudyQuestionJobFactory(
        status="failed",
        error_message="<b>bold</b> failure",
        study_question__text="<script>alert('q')</script>",
        study_question__explanation="<img src=x onerror=alert(1)>",
        llm_ms=250,
    )
    url = reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk])
    html = admin_client.get(url).content.decode()
    assert "<script>alert('q')</script>" not in html
    assert "<img src=x onerror=alert(1)>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt; failure" in html
    assert "250 ms" in html
    assert 'name="status"' not in html, "no editable state fields"
    assert admin_client.post(url, {"status": "pending"}).status_code == 403
    list_html = admin_client.get(JOBS_URL).content.decode()
    assert "&lt;script&gt;" in list_html and "<script>alert('q')" not in list_html


def test_no_add_or_delete_of_jobs(admin_client):
    assert admin_client.get(reverse("admin:studyqueue_studyquestionjob_add")).status_code == 403
    job = StudyQuestionJobFactory()
    url = reverse("admin:studyqueue_studyquestionjob_delete", args=[job.pk])
    assert admin_client.get(url).status_code == 403


# --------------------------------------------------------------------------- actions


def test_retry_action_on_every_status(admin_client, admin_user):
    jobs = one_of_each()
    messages = act(admin_client, "retry_jobs", jobs.values())
    assert messages == [
        "Retried 2 job(s).",
        "3 job(s) left alone: only failed or skipped jobs can be retried.",
    ]
    assert statuses(jobs) == {
        "pending": "pending",
        "processing": "processing",
        "completed": "completed",
        "failed": "pending",
        "skipped": "pending",
    }
    entries = LogEntry.objects.filter(user=admin_user, action_flag=CHANGE)
    assert sorted(int(e.object_id) for e in entries) == sorted(
        [jobs["failed"].pk, jobs["skipped"].pk]
    )
    assert all("Retried" in e.get_change_message() for e in entries)


def test_retry_refuses_a_second_active_job(admin_client):
    question = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=question, status="pending")
    failed = StudyQuestionJobFactory(study_question=question, status="failed")
    messages = act(admin_client, "retry_jobs", [failed])
    assert messages == [
        "Retried 0 job(s).",
        "1 job(s) refused: their question already has an active job of the same kind.",
    ]
    assert StudyQuestionJob.objects.get(pk=failed.pk).status == "failed"


def test_skip_action_on_every_status(admin_client):
    jobs = one_of_each()
    messages = act(admin_client, "skip_jobs", jobs.values())
    assert messages == ["Skipped 2 job(s).", "3 job(s) left alone: already finished."]
    assert statuses(jobs)["pending"] == "skipped"
    assert statuses(jobs)["processing"] == "skipped"
    assert StudyQuestionJob.objects.get(pk=jobs["pending"].pk).error_code == "operator_skipped"
    assert LogEntry.objects.count() == 2


def test_reset_stale_action_on_every_status(admin_client):
    jobs = one_of_each()
    fresh = StudyQuestionJobFactory(status="processing", heartbeat_at=timezone.now())
    messages = act(admin_client, "reset_stale_jobs", [*jobs.values(), fresh])
    assert messages == [
        "Reset 1 stale job(s) to pending; 0 ended failed (no attempts left).",
        "5 job(s) left alone: not processing, or their heartbeat is recent (threshold 10 min).",
    ]
    assert statuses(jobs)["processing"] == "pending"
    assert StudyQuestionJob.objects.get(pk=fresh.pk).status == "processing"
    assert LogEntry.objects.count() == 1


def test_reset_all_stale_button(admin_client):
    jobs = one_of_each()
    assert admin_client.get(RESET_URL).status_code == 405
    response = admin_client.post(RESET_URL, follow=True)
    assert response.redirect_chain[-1][0] == JOBS_URL
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Reset 1 stale job(s) to pending; 0 ended failed (no attempts left)."]
    assert statuses(jobs)["processing"] == "pending"
    assert "Reset all stale jobs" in admin_client.get(JOBS_URL).content.decode()


def test_reset_all_stale_button_needs_csrf(admin_user):
    one_of_each()
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(RESET_URL).status_code == 403
    assert StudyQuestionJob.objects.filter(status="processing").count() == 1


# --------------------------------------------------------------------------- permissions


def test_staff_without_custom_permissions_sees_no_actions_and_no_button():
    client = staff("view_studyquestionjob")
    one_of_each()
    response = client.get(JOBS_URL)
    assert response.status_code == 200
    html = response.content.decode()
    for action in ("retry_jobs", "skip_jobs", "reset_stale_jobs"):
        assert action not in html
    assert "Reset all stale jobs" not in html
    assert client.post(RESET_URL).status_code == 403
    failed = StudyQuestionJob.objects.get(status="failed")
    client.post(JOBS_URL, {"action": "retry_jobs", "_selected_action": [failed.pk]})
    assert StudyQuestionJob.objects.get(pk=failed.pk).status == "failed"


def test_each_permission_unlocks_its_own_action():
    client = staff("view_studyquestionjob", "retry_studyquestionjob")
    StudyQuestionJobFactory()
    html = client.get(JOBS_URL).content.decode()
    assert "retry_jobs" in html
    assert "skip_jobs" not in html and "reset_stale_jobs" not in html


# --------------------------------------------------------------------------- dashboard


def test_dashboard_numbers_on_a_known_data_set(admin_client):
    now = timezone.now()
    StudyQuestionJobFactory.create_batch(3)  # pending
    old_pending = StudyQuestionJobFactory()
    StudyQuestionJob.objects.filter(pk=old_pending.pk).update(created_at=now - timedelta(hours=2))
    StudyQuestionJobFactory(
        status="processing", started_at=now, heartbeat_at=now - timedelta(hours=1)
    )
    StudyQuestionJobFactory(status="processing", started_at=now, heartbeat_at=now)
    StudyQuestionJobFactory.create_batch(
        4, status="completed", completed_at=now - timedelta(minutes=5), llm_ms=2500
    )
    StudyQuestionJobFactory.create_batch(
        2, status="failed", completed_at=now - timedelta(hours=3), error_code="llm_timeout"
    )
    StudyQuestionJobFactory(status="completed", completed_at=now - timedelta(days=3))
    StudyQuestionJobFactory(
        kind="session_summary", status="skipped", completed_at=now, error_code="unsupported_kind"
    )

    stats = collect(now)
    assert stats.active == {"pending": {"explanation": 4}, "processing": {"explanation": 2}}
    assert stats.finished_24h == {
        "completed": {"explanation": 4},
        "failed": {"explanation": 2},
        "skipped": {"session_summary": 1},
    }
    assert stats.stale == 1
    assert stats.oldest_pending_age >= timedelta(hours=2)
    assert len(stats.hours) == 24
    five_minutes_ago = (now - timedelta(minutes=5)).replace(minute=0, second=0, microsecond=0)
    (bucket,) = [h for h in stats.hours if h.start == five_minutes_ago]
    assert (bucket.completed, bucket.llm_ms) == (4, 10_000)
    assert sum(h.completed for h in stats.hours) == 4
    assert sum(h.failed for h in stats.hours) == 2
    assert stats.top_errors == [("llm_timeout", 2), ("unsupported_kind", 1)]
    assert stats.total_estimate == 14 or stats.total_is_estimate

    html = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'id="sq-status-kind"' in html
    assert "<td>llm_timeout" in html.replace('<td class="label" style="width:130px">', "<td>")
    assert "10.0 s" in html and "4 / 0" in html
    assert "2h 0m" in html or "2h 1m" in html


def test_dashboard_is_staff_only():
    anonymous = Client()
    assert anonymous.get(DASHBOARD_URL).status_code == 302  # to the login page
    assert staff().get(DASHBOARD_URL).status_code == 403


def test_dashboard_is_linked_from_the_app_index_and_the_changelist(admin_client):
    app_index = admin_client.get(reverse("admin:app_list", args=["studyqueue"])).content.decode()
    assert DASHBOARD_URL in app_index
    assert DASHBOARD_URL in admin_client.get(JOBS_URL).content.decode()


# --------------------------------------------------------------------------- questions


def test_question_list_filter_latest_job_and_enqueue_action(admin_client):
    explained = StudyQuestionFactory(explanation="done")
    waiting = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=waiting, status="failed")
    response = admin_client.get(f"{QUESTIONS_URL}?explanation=missing")
    assert [q.pk for q in response.context["cl"].result_list] == [waiting.pk]
    assert "Failed" in response.content.decode()
    response = admin_client.get(f"{QUESTIONS_URL}?explanation=outdated")  # another version
    assert [q.pk for q in response.context["cl"].result_list] == [explained.pk]

    fresh = StudyQuestionFactory()
    StudyQuestionJobFactory(study_question=fresh)  # already queued
    response = admin_client.post(
        QUESTIONS_URL,
        {"action": "regenerate_explanation", "_selected_action": [waiting.pk, fresh.pk]},
        follow=True,
    )
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == ["Queued 1 explanation job(s); 1 already queued."]
    assert StudyQuestionJob.objects.filter(study_question=waiting, status="pending").count() == 1


def test_question_page_shows_jobs_inline_and_escapes_the_explanation(admin_client):
    question = StudyQuestionFactory(explanation="<script>evil()</script>")
    job = StudyQuestionJobFactory(study_question=question, status="completed")
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    html = admin_client.get(url).content.decode()
    assert reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]) in html
    assert "<script>evil()</script>" not in html
    assert "&lt;script&gt;evil()&lt;/script&gt;" in html
    assert StudyQuestion.objects.get(pk=question.pk).explanation == "<script>evil()</script>"


@pytest.mark.parametrize("term", ["²", "٣", "99999999999999999999", "#", "🙂", "-1"])
def test_any_unicode_search_term_works(admin_client, term):
    StudyQuestionJobFactory(study_question__text=f"about {term}")
    response = admin_client.get(JOBS_URL, {"q": term})
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 1  # found as text


def test_long_texts_are_capped_on_pages_with_the_full_text_behind_a_link(admin_client):
    from studyqueue.admin import LONG_TEXT_SHOWN

    long_text = "word " * 100_000  # 500,000 characters
    question = StudyQuestionFactory(explanation=long_text)
    job = StudyQuestionJobFactory(study_question=question, status="completed")
    full = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
    for url in (
        reverse("admin:studyqueue_studyquestion_change", args=[question.pk]),
        reverse("admin:studyqueue_studyquestionjob_change", args=[job.pk]),
    ):
        html = admin_client.get(url).content.decode()
        assert len(html) < LONG_TEXT_SHOWN + 100_000, url
        assert f'href="{full}"' in html and "more characters not shown" in html
    response = admin_client.get(full)
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == long_text


def test_the_full_text_view_needs_view_permission(client):
    question = StudyQuestionFactory(explanation="secret-ish")
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(staff)
    url = reverse("admin:studyqueue_studyquestion_explanation", args=[question.pk])
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_studyquestion"))
    assert client.get(url).status_code == 200


def test_lists_do_not_read_the_long_columns(admin_client):
    question = StudyQuestionFactory(explanation="x" * 10_000)
    StudyQuestionJobFactory(study_question=question)
    (job,) = admin_client.get(JOBS_URL).context["cl"].result_list
    assert "error_message" in job.get_deferred_fields()
    assert {"text", "explanation"} <= job.study_question.get_deferred_fields()
    (row,) = admin_client.get(QUESTIONS_URL).context["cl"].result_list
    assert {"text", "explanation", "choices"} <= row.get_deferred_fields()


def _question_form(question: StudyQuestion, choices: str) -> dict[str, str]:
    return {
        "text": question.text,
        "choices": choices,
        "answer": question.answer,
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
    }


@pytest.mark.parametrize(
    "typed,stored",
    [
        ("Paris\nRome\n\n  Berlin  \n", ["Paris", "Rome", "Berlin"]),
        ("", []),
        ("null", ["null"]),
        ("42\ntrue", ["42", "true"]),
    ],
)
def test_choices_are_edited_one_per_line(admin_client, typed, stored):
    question = StudyQuestionFactory(choices=["old"])
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    form_page = admin_client.get(url).content.decode()
    assert "\nold</textarea>" in form_page
    response = admin_client.post(url, _question_form(question, typed))
    assert response.status_code == 302, response.content.decode()[:2000]
    question.refresh_from_db()
    assert question.choices == stored


@pytest.mark.parametrize("field", ["text", "choices", "answer"])
@pytest.mark.parametrize("page", ["add", "change"])
def test_a_nul_in_any_question_field_is_a_form_error(admin_client, field, page):
    # PostgreSQL holds no NUL in text, nor as an escape in JSON: a form error, never a 500.
    question = StudyQuestionFactory(text="Capital of France?", choices=["Paris", "Rome"])
    if page == "add":
        url = reverse("admin:studyqueue_studyquestion_add")
    else:
        url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    data = _question_form(question, "Paris\nRome")
    data[field] = "Ber\x00lin"
    response = admin_client.post(url, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert StudyQuestion.objects.count() == 1
    question.refresh_from_db()
    assert (question.text, question.choices) == ("Capital of France?", ["Paris", "Rome"])


def test_a_choice_with_a_nul_names_the_choice(admin_client):
    question = StudyQuestionFactory()
    url = reverse("admin:studyqueue_studyquestion_change", args=[question.pk])
    response = admin_client.post(url, _question_form(question, "Paris\nRo\x00me"))
    assert response.context["adminform"].form.errors["choices"] == [
        "Choice 2 holds a character that cannot be stored (a NUL or a lone surrogate)."
    ]


@pytest.mark.parametrize(
    "model", ["studyquestionjob", "studyquestion", "explanationrevision", "queuepause"]
)
def test_a_nul_in_a_list_filter_or_search_is_no_server_error(admin_client, model):
    StudyQuestionJobFactory(status="failed")
    url = reverse(f"admin:studyqueue_{model}_changelist")
    params = ("q", "status", "kind", "error_code", "prompt_version", "finish_reason", "review")
    for param in params:
        response = admin_client.get(url, {param: "a\x00"})
        # The admin's own answer to parameters it cannot use: its list, flagged ?e=1.
        assert (response.status_code, response.url) == (302, url + "?e=1"), param


@pytest.mark.parametrize("selected", ["1\x00", "abc", str(2**63), "-1"])
def test_a_crafted_selection_is_refused_with_a_message(admin_client, selected):
    job = StudyQuestionJobFactory(status="failed")
    response = admin_client.post(
        JOBS_URL, {"action": "retry_jobs", "_selected_action": [str(job.pk), selected]}, follow=True
    )
    assert response.status_code == 200
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "The selection holds something that is not an id; nothing was changed."
    ]
    assert StudyQuestionJob.objects.get(pk=job.pk).status == "failed"


@pytest.mark.parametrize("value", [None, 42, True, "Paris", {"a": "b"}, ["ok", 3], ["ok", " "]])
def test_the_model_refuses_choices_that_are_not_a_list_of_strings(value):
    from django.core.exceptions import ValidationError

    question = StudyQuestionFactory.build(choices=value)
    with pytest.raises(ValidationError) as info:
        question.full_clean()
    assert "choices" in info.value.message_dict


# --------------------------------------------------------------------------- pause, consumers, live


PAUSES_URL = reverse("admin:studyqueue_queuepause_changelist")
PAUSE_ADD_URL = reverse("admin:studyqueue_queuepause_add")
DATA_URL = reverse("admin:studyqueue_queuedashboard_data")


def test_an_operator_pauses_and_resumes_from_the_admin_with_the_log_written(admin_client):
    from django.contrib.admin.models import ADDITION, DELETION

    from studyqueue.models import QueuePause

    response = admin_client.post(PAUSE_ADD_URL, {"kind": "", "reason": "GPU for training"})
    assert response.status_code == 302
    pause = QueuePause.objects.get()
    assert (pause.kind, pause.reason, pause.paused_by) == ("", "GPU for training", "admin")
    assert LogEntry.objects.filter(action_flag=ADDITION, object_id=str(pause.pk)).exists()
    jobs_page = admin_client.get(JOBS_URL).content.decode()
    assert "Queue paused for" in jobs_page and "GPU for training" in jobs_page
    dashboard_page = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'class="sq-note sq-paused" data-kind="all"' in dashboard_page

    response = admin_client.post(
        PAUSES_URL, {"action": "resume_selected", "_selected_action": [pause.pk]}, follow=True
    )
    assert "Resumed for every kind." in response.content.decode()
    assert not QueuePause.objects.exists()
    assert LogEntry.objects.filter(action_flag=DELETION, object_id=str(pause.pk)).exists()


def test_pausing_needs_its_own_permission(client):
    staff = User.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_studyquestionjob"))
    client.force_login(staff)
    assert client.get(PAUSES_URL).status_code == 200  # may see the pauses
    assert client.post(PAUSE_ADD_URL, {"kind": "", "reason": "x"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    assert client.post(PAUSE_ADD_URL, {"kind": "", "reason": "x"}).status_code == 302


def test_the_dashboard_says_when_no_consumer_runs_and_when_the_llm_is_down(admin_client):
    from studyqueue.models import QueueConsumer

    assert 'id="sq-no-consumer"' in admin_client.get(DASHBOARD_URL).content.decode()
    now = timezone.now()
    QueueConsumer.objects.create(
        worker_id="gpu-box:42",
        host="gpu-box",
        pid=42,
        started_at=now,
        seen_at=now,
        interval_seconds=60,
        llm_url="http://[redacted]@127.0.0.1:8080/v1",
        breaker_open=True,
        breaker_since=now,
        breaker_error="llm_unavailable",
    )
    html = admin_client.get(DASHBOARD_URL).content.decode()
    assert 'id="sq-no-consumer"' not in html
    assert 'id="sq-llm-down"' in html
    assert 'data-worker="gpu-box:42" data-state="live"' in html


def test_the_live_data_view_needs_the_same_permission(admin_client, client):
    StudyQuestionJobFactory(status="pending")
    data = admin_client.get(DATA_URL).json()
    assert (data["pending"], data["consumers_live"], data["paused"]) == (1, 0, [])
    assert 'id="sq-status-kind"' in data["html"] and data["updated_at"]
    staff = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(DATA_URL).status_code == 403


# --------------------------------------------------------------------------- bulk actions at scale

SCALE = 35_001  # the "select all" of the outside probe


def many_jobs(count: int, status: str) -> list[int]:
    """``count`` jobs in ``status``, each on its own question, made in bulk."""
    questions = StudyQuestion.objects.bulk_create(
        [StudyQuestion(text=f"Q{i}?") for i in range(count)], batch_size=2000
    )
    jobs = StudyQuestionJob.objects.bulk_create(
        [StudyQuestionJob(study_question=q, kind="explanation", status=status) for q in questions],
        batch_size=2000,
    )
    return sorted(j.pk for j in jobs)


def act_on_all(client: Client, url: str, action: str, **filters: str) -> list[str]:
    """The action on "select all N" of the (filtered) list, as the admin's page posts it."""
    response = client.post(
        url + ("?" + "&".join(f"{k}={v}" for k, v in filters.items()) if filters else ""),
        {"action": action, "select_across": "1", "index": "0", "_selected_action": ["1"]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_skip_then_retry_of_35001_jobs_finish_and_are_logged_once(admin_client, admin_user):
    ids = many_jobs(SCALE, "pending")
    assert act_on_all(admin_client, JOBS_URL, "skip_jobs", status="pending") == [
        f"Skipped {SCALE} job(s)."
    ]
    assert StudyQuestionJob.objects.filter(status="skipped").count() == SCALE
    assert act_on_all(admin_client, JOBS_URL, "retry_jobs", status="skipped") == [
        f"Retried {SCALE} job(s)."
    ]
    assert StudyQuestionJob.objects.filter(status="pending", attempts=0).count() == SCALE
    # One entry per action, naming every job (as id ranges), not 35,001 entries.
    skip_entry, retry_entry = LogEntry.objects.order_by("pk")
    expected = f"{ids[0]}-{ids[-1]}"
    assert skip_entry.user == retry_entry.user == admin_user
    assert skip_entry.object_repr == f"{SCALE} study question jobs"
    assert skip_entry.get_change_message() == f"Skipped by an operator: {SCALE} (ids {expected})"
    assert retry_entry.get_change_message() == (
        f"Retried: back to pending, attempts reset: {SCALE} (ids {expected})"
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_regenerate_of_35001_questions_finishes_and_is_logged_once(admin_client):
    many_jobs(SCALE, "completed")
    assert act_on_all(admin_client, QUESTIONS_URL, "regenerate_explanation") == [
        f"Queued {SCALE} explanation job(s); 0 already queued."
    ]
    assert StudyQuestionJob.objects.filter(status="pending").count() == SCALE
    (entry,) = LogEntry.objects.all()
    assert entry.get_change_message().startswith(
        f"Regenerate explanation: {SCALE} job(s) queued for {SCALE} selected question(s)"
    )


def test_a_selection_over_the_limit_changes_nothing_and_names_the_command(
    admin_client, monkeypatch
):
    from studyqueue.admin import common

    monkeypatch.setattr(common, "ACTION_LIMIT", 3)  # a test-sized limit
    for _ in range(4):
        StudyQuestionJobFactory(status="failed")
    (message,) = act_on_all(admin_client, JOBS_URL, "retry_jobs")
    assert message.startswith("Nothing changed: the admin acts on at most 3 rows at once.")
    assert "manage.py retryjobs" in message
    (message,) = act_on_all(admin_client, JOBS_URL, "skip_jobs")
    assert "manage.py skipjobs" in message
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "regenerate_explanation")
    assert "manage.py enqueue" in message
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "download_csv")
    assert "manage.py exportexplanations" in message
    assert StudyQuestionJob.objects.filter(status="failed").count() == 4
    assert not LogEntry.objects.exists()
    # Three are within the limit: done, with an entry each (small sets keep per-row history).
    for job in StudyQuestionJob.objects.all()[:1]:
        StudyQuestionJob.objects.filter(pk=job.pk).update(status="completed")
    assert act_on_all(admin_client, JOBS_URL, "retry_jobs", status="failed") == [
        "Retried 3 job(s)."
    ]
    assert LogEntry.objects.count() == 3


def test_deleting_more_questions_than_the_delete_limit_is_refused(admin_client, monkeypatch):
    from studyqueue.admin import questions

    monkeypatch.setattr(questions, "DELETE_LIMIT", 2)
    for _ in range(3):
        StudyQuestionFactory()
    (message,) = act_on_all(admin_client, QUESTIONS_URL, "delete_selected")
    assert message.startswith("Nothing deleted: select at most 2 questions")
    assert StudyQuestion.objects.count() == 3
    page = admin_client.post(
        QUESTIONS_URL + "?q=What",
        {"action": "delete_selected", "_selected_action": [StudyQuestion.objects.first().pk]},
    )
    assert "Are you sure" in page.content.decode()  # Django's own confirmation, as before


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_csv_download_of_a_big_selection_reads_in_batches(admin_client):
    count = 33_000  # one query with these ids is past SQLite's 32,766 bound parameters
    many_jobs(count, "completed")
    StudyQuestion.objects.update(explanation="Because.")
    response = admin_client.post(
        QUESTIONS_URL,
        {"action": "download_csv", "select_across": "1", "index": "0", "_selected_action": ["1"]},
    )
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == count + 1  # the header
