"""studyqueue's schema as 0.1.0 left it (migrations 0001-0017, squashed for 0.2.0).

Written from the models' state at 0017, in the order the old migrations left the columns, so a
new database gets the very tables, columns, defaults, indexes and constraints (names too) a
0.1.0 database has (``tests/test_migrations.py`` compares both with a stored read of 0017's).
The old migrations ran no SQL of their own; their data steps (0007, 0010, 0011) only converted
rows that existed then and have nothing to do on a new database.

A database at 0017 (every 0.1.0 install) has all of ``replaces`` recorded: Django marks this
migration applied without running it. A database at an earlier migration is not supported: it
upgrades through 0.1.0 first (Django cannot use a squashed migration only partly applied).
The one import from studyqueue is ``studyqueue.models``, for two callables the fields name
(the default of ``max_attempts``, the validator of ``choices``); nothing in the database.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import studyqueue.models

ERROR_CODES = [
    ("llm_unavailable", "LLM server unreachable"),
    ("llm_timeout", "LLM call timed out"),
    ("llm_overloaded", "LLM server overloaded (429/503)"),
    ("llm_server_error", "LLM server error (5xx)"),
    ("llm_rejected", "LLM server rejected the request (4xx)"),
    ("llm_bad_response", "LLM reply could not be parsed"),
    ("llm_empty", "LLM reply was empty"),
    ("question_missing", "Question no longer exists"),
    ("question_empty", "Question has no text"),
    ("question_invalid", "Question data is invalid (choices)"),
    ("question_changed", "Question changed during the LLM call"),
    ("stale", "Worker stopped sending heartbeats"),
    ("unsupported_kind", "Kind is reserved, not implemented"),
    ("unknown_kind", "Kind is not known to this version"),
    ("operator_skipped", "Skipped by an operator"),
    ("internal", "Unexpected internal error"),
]
KINDS = [("explanation", "Explanation"), ("session_summary", "Session summary")]


def big_id():
    return models.BigAutoField(
        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
    )


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("studyqueue", "0001_initial"),
        ("studyqueue", "0002_admin_indexes_and_dashboard"),
        ("studyqueue", "0003_job_free_releases"),
        ("studyqueue", "0004_question_choices_validated"),
        ("studyqueue", "0005_consumers_pauses_llm_timing"),
        ("studyqueue", "0006_explanation_revisions"),
        ("studyqueue", "0007_existing_explanations_as_revisions"),
        ("studyqueue", "0008_question_external_id"),
        ("studyqueue", "0009_question_changed"),
        ("studyqueue", "0010_reply_metadata_on_the_revision"),
        ("studyqueue", "0011_cached_tokens_decode_rate"),
        ("studyqueue", "0012_field_labels"),
        ("studyqueue", "0013_revision_stated_answer"),
        ("studyqueue", "0014_review"),
        ("studyqueue", "0015_gate_limit"),
        ("studyqueue", "0016_consumer_writes_with"),
        ("studyqueue", "0017_job_attempts"),
    ]

    dependencies = []

    operations = [
        # The question, the job and the revision point at each other: the question and the
        # job first, then the revision, then their fields that point at it.
        migrations.CreateModel(
            name="StudyQuestion",
            fields=[
                ("id", big_id()),
                (
                    "text",
                    models.TextField(
                        help_text="The question as shown to the learner.", verbose_name="text"
                    ),
                ),
                (
                    "choices",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="Answer options, if any: a list of strings.",
                        validators=[studyqueue.models.validate_choices],
                        verbose_name="choices",
                    ),
                ),
                (
                    "answer",
                    models.TextField(
                        blank=True, help_text="The correct answer, if known.", verbose_name="answer"
                    ),
                ),
                (
                    "explanation",
                    models.TextField(
                        blank=True,
                        help_text="The current revision's text.",
                        verbose_name="explanation",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False, verbose_name="created"
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated")),
                (
                    "explanation_flags",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text="Quality flags of the current explanation.",
                        verbose_name="quality flags",
                    ),
                ),
                (
                    "explanation_prompt_version",
                    models.CharField(
                        blank=True,
                        db_default="",
                        db_index=True,
                        default="",
                        help_text="The prompt version that wrote it.",
                        max_length=12,
                        verbose_name="prompt version",
                    ),
                ),
            ],
            options={
                "verbose_name": "study question",
                "verbose_name_plural": "study questions",
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="StudyQuestionJob",
            fields=[
                ("id", big_id()),
                ("kind", models.CharField(choices=KINDS, max_length=15, verbose_name="kind")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("processing", "Processing"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                            ("skipped", "Skipped"),
                        ],
                        default="pending",
                        max_length=10,
                        verbose_name="status",
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0, verbose_name="attempts")),
                (
                    "max_attempts",
                    models.PositiveIntegerField(
                        default=studyqueue.models.default_max_attempts, verbose_name="max attempts"
                    ),
                ),
                (
                    "error_code",
                    models.CharField(
                        blank=True, choices=ERROR_CODES, max_length=16, verbose_name="error code"
                    ),
                ),
                ("error_message", models.TextField(blank=True, verbose_name="error message")),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, verbose_name="created"),
                ),
                (
                    "run_after",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Not claimed before this.",
                        verbose_name="run after",
                    ),
                ),
                ("started_at", models.DateTimeField(blank=True, null=True, verbose_name="started")),
                (
                    "heartbeat_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last heartbeat"),
                ),
                (
                    "completed_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="completed"),
                ),
                (
                    "claim_token",
                    models.UUIDField(
                        blank=True,
                        help_text="Fences writes to one claim.",
                        null=True,
                        verbose_name="claim token",
                    ),
                ),
                ("worker_id", models.CharField(blank=True, max_length=200, verbose_name="worker")),
                (
                    "llm_ms",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="LLM call time (ms).",
                        null=True,
                        verbose_name="LLM time (ms)",
                    ),
                ),
                (
                    "study_question",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="jobs",
                        to="studyqueue.studyquestion",
                        verbose_name="question",
                    ),
                ),
                (
                    "free_releases",
                    models.PositiveSmallIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Times in a row the job was handed back without counting its attempt after its call reached the LLM server (bounded: every job ends).",
                        verbose_name="free releases",
                    ),
                ),
                (
                    "max_tokens",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="max_tokens for its calls (blank: LLM_MAX_TOKENS).",
                        null=True,
                        verbose_name="max tokens",
                    ),
                ),
                (
                    "quality_retried",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Already retried once for a quality flag.",
                        verbose_name="retried for quality",
                    ),
                ),
            ],
            options={
                "verbose_name": "study question job",
                "verbose_name_plural": "study question jobs",
                "ordering": ["-id"],
                "permissions": [
                    ("retry_studyquestionjob", "Can retry failed or skipped jobs"),
                    ("skip_studyquestionjob", "Can skip pending or processing jobs"),
                    ("reset_stale_studyquestionjob", "Can reset stale jobs"),
                ],
                "indexes": [
                    models.Index(
                        condition=models.Q(("status", "pending")),
                        fields=["id"],
                        name="studyqueue_job_claim",
                    ),
                    models.Index(
                        condition=models.Q(("status", "processing")),
                        fields=["heartbeat_at"],
                        name="studyqueue_job_stale",
                    ),
                    models.Index(fields=["status", "-id"], name="studyqueue_job_status_id"),
                    models.Index(
                        condition=models.Q(("completed_at__isnull", False)),
                        fields=["completed_at"],
                        name="studyqueue_job_completed",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                ["pending", "processing", "completed", "failed", "skipped"],
                            )
                        ),
                        name="studyqueue_job_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("kind__in", ["explanation", "session_summary"])),
                        name="studyqueue_job_kind_valid",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("status__in", ("pending", "processing"))),
                        fields=("study_question", "kind"),
                        name="studyqueue_job_one_active",
                        violation_error_message="This question already has an active job of this kind.",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ExplanationRevision",
            fields=[
                ("id", big_id()),
                ("text", models.TextField(verbose_name="text")),
                ("model", models.CharField(blank=True, max_length=200, verbose_name="model")),
                (
                    "prompt_version",
                    models.CharField(blank=True, max_length=12, verbose_name="prompt version"),
                ),
                (
                    "prompt_label",
                    models.CharField(blank=True, max_length=200, verbose_name="prompt label"),
                ),
                (
                    "prompt_tokens",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="prompt tokens"
                    ),
                ),
                (
                    "completion_tokens",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="completion tokens"
                    ),
                ),
                (
                    "first_token_ms",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="time to first token (ms)"
                    ),
                ),
                (
                    "tokens_per_second",
                    models.FloatField(
                        blank=True,
                        help_text="Decode rate: tokens after the first over the time from the first to the last (blank: fewer than two tokens or under 50 ms).",
                        null=True,
                        verbose_name="tokens per second",
                    ),
                ),
                (
                    "finish_reason",
                    models.CharField(
                        blank=True,
                        help_text="As the server said it (stop, length…).",
                        max_length=20,
                        verbose_name="finish reason",
                    ),
                ),
                ("flags", models.JSONField(blank=True, default=list, verbose_name="quality flags")),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, verbose_name="created"),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="studyqueue.studyquestionjob",
                        verbose_name="job",
                    ),
                ),
                (
                    "question",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="revisions",
                        to="studyqueue.studyquestion",
                        verbose_name="question",
                    ),
                ),
                (
                    "cached_tokens",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Prompt tokens the server served from its cache (blank: it did not say).",
                        null=True,
                        verbose_name="cached tokens",
                    ),
                ),
                (
                    "stated_answer",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The answer the reply states, as written (blank: none could be read, or it was written before answers were read).",
                        max_length=200,
                        verbose_name="stated answer",
                    ),
                ),
                (
                    "author",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="Who wrote it: blank for the LLM, else the reviewer who corrected it.",
                        max_length=150,
                        verbose_name="author",
                    ),
                ),
                (
                    "based_on",
                    models.ForeignKey(
                        blank=True,
                        help_text="The revision a reviewer corrected into this one.",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="studyqueue.explanationrevision",
                        verbose_name="based on",
                    ),
                ),
                (
                    "candidate",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Written for a question whose explanation was approved or edited: it becomes current only when a reviewer accepts it.",
                        verbose_name="candidate",
                    ),
                ),
                (
                    "review_status",
                    models.CharField(
                        choices=[
                            ("unreviewed", "unreviewed"),
                            ("approved", "approved"),
                            ("rejected", "rejected"),
                            ("edited", "edited"),
                        ],
                        db_default="unreviewed",
                        default="unreviewed",
                        max_length=10,
                        verbose_name="review status",
                    ),
                ),
                (
                    "reviewed_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="reviewed at"),
                ),
                (
                    "reviewed_by",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        max_length=150,
                        verbose_name="reviewed by",
                    ),
                ),
            ],
            options={
                "verbose_name": "explanation revision",
                "verbose_name_plural": "explanation revisions",
                "ordering": ["-id"],
                "permissions": [
                    ("restore_explanationrevision", "Can make an older revision current"),
                    ("review_explanation", "Can review explanations (approve, reject, edit)"),
                ],
                "indexes": [
                    models.Index(
                        condition=models.Q(("candidate", True)),
                        fields=["question"],
                        name="studyqueue_revision_candidate",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("review_status__in", ["unreviewed", "approved", "rejected", "edited"])
                        ),
                        name="studyqueue_revision_review_status_valid",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="studyquestion",
            name="current_revision",
            field=models.ForeignKey(
                blank=True,
                help_text="The revision shown as its explanation (its model, tokens, times).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="studyqueue.explanationrevision",
                verbose_name="current revision",
            ),
        ),
        migrations.AddField(
            model_name="studyquestion",
            name="external_id",
            field=models.CharField(
                blank=True,
                help_text="Your id for it (imports update the question with the same id).",
                max_length=200,
                null=True,
                unique=True,
                verbose_name="external id",
            ),
        ),
        migrations.AddField(
            model_name="studyquestionjob",
            name="revision",
            field=models.ForeignKey(
                blank=True,
                help_text="The reply that completed it: model, tokens, timings, prompt version.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="studyqueue.explanationrevision",
                verbose_name="revision",
            ),
        ),
        migrations.CreateModel(
            name="JobAttempt",
            fields=[
                ("id", big_id()),
                (
                    "number",
                    models.PositiveIntegerField(
                        help_text="1, 2, … over the job's whole life, an operator's retries included.",
                        verbose_name="attempt",
                    ),
                ),
                ("started_at", models.DateTimeField(verbose_name="started")),
                ("ended_at", models.DateTimeField(blank=True, null=True, verbose_name="ended")),
                ("worker_id", models.CharField(blank=True, max_length=200, verbose_name="worker")),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("completed", "Completed"),
                            ("retrying", "Retrying"),
                            ("failed", "Failed"),
                            ("released", "Handed back"),
                            ("skipped", "Skipped"),
                            ("stale", "Stale"),
                        ],
                        max_length=9,
                        verbose_name="outcome",
                    ),
                ),
                (
                    "error_code",
                    models.CharField(
                        blank=True, choices=ERROR_CODES, max_length=16, verbose_name="error code"
                    ),
                ),
                ("error_message", models.TextField(blank=True, verbose_name="error message")),
                (
                    "prompt_tokens",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="prompt tokens"
                    ),
                ),
                (
                    "completion_tokens",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="completion tokens"
                    ),
                ),
                (
                    "first_token_ms",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="time to first token (ms)"
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_log",
                        to="studyqueue.studyquestionjob",
                        verbose_name="job",
                    ),
                ),
            ],
            options={
                "verbose_name": "job attempt",
                "verbose_name_plural": "job attempts",
                "ordering": ["job", "number"],
                "default_permissions": (),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "number"), name="studyqueue_attempt_number"
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("ended_at__isnull", True)),
                        fields=("job",),
                        name="studyqueue_attempt_one_open",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "outcome__in",
                                [
                                    "",
                                    "completed",
                                    "retrying",
                                    "failed",
                                    "released",
                                    "skipped",
                                    "stale",
                                ],
                            )
                        ),
                        name="studyqueue_attempt_outcome_valid",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="QueueConsumer",
            fields=[
                ("id", big_id()),
                ("worker_id", models.CharField(max_length=200, unique=True, verbose_name="worker")),
                ("host", models.CharField(max_length=255, verbose_name="host")),
                ("pid", models.PositiveIntegerField(verbose_name="pid")),
                ("started_at", models.DateTimeField(verbose_name="started")),
                (
                    "seen_at",
                    models.DateTimeField(
                        help_text="Last report: start, each cycle, stop.",
                        verbose_name="last report",
                    ),
                ),
                ("stopped_at", models.DateTimeField(blank=True, null=True, verbose_name="stopped")),
                ("interval_seconds", models.FloatField(verbose_name="interval (s)")),
                (
                    "jobs_completed",
                    models.PositiveIntegerField(
                        default=0, help_text="Since it started.", verbose_name="jobs completed"
                    ),
                ),
                (
                    "jobs_running",
                    models.PositiveIntegerField(default=0, verbose_name="jobs running"),
                ),
                ("breaker_open", models.BooleanField(default=False, verbose_name="breaker open")),
                (
                    "breaker_since",
                    models.DateTimeField(blank=True, null=True, verbose_name="breaker open since"),
                ),
                (
                    "breaker_error",
                    models.CharField(blank=True, max_length=16, verbose_name="breaker error"),
                ),
                (
                    "llm_url",
                    models.CharField(
                        help_text="Credentials redacted.", max_length=500, verbose_name="LLM server"
                    ),
                ),
                (
                    "paused_kinds",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="The kinds paused at its last report, as QueuePause.kind ('': every kind).",
                        verbose_name="paused kinds",
                    ),
                ),
                (
                    "gate_permits",
                    models.CharField(
                        blank=True,
                        help_text="GATE_PERMITS as it started: a number, or auto (see GateLimit).",
                        max_length=10,
                        verbose_name="gate permits",
                    ),
                ),
                (
                    "gate_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Concurrent LLM calls its gate allowed at its last report.",
                        null=True,
                        verbose_name="gate limit",
                    ),
                ),
                (
                    "model",
                    models.CharField(
                        blank=True,
                        help_text="LLM_MODEL ('': the server's default).",
                        max_length=200,
                        verbose_name="model",
                    ),
                ),
                (
                    "prompt_label",
                    models.CharField(blank=True, max_length=200, verbose_name="prompt label"),
                ),
                (
                    "prompt_version",
                    models.CharField(blank=True, max_length=12, verbose_name="prompt version"),
                ),
            ],
            options={
                "verbose_name": "consumer",
                "verbose_name_plural": "consumers",
                "ordering": ["-seen_at"],
            },
        ),
        migrations.CreateModel(
            name="QueuePause",
            fields=[
                ("id", big_id()),
                (
                    "kind",
                    models.CharField(
                        blank=True,
                        choices=KINDS,
                        help_text="Blank: every kind.",
                        max_length=15,
                        unique=True,
                        verbose_name="kind",
                    ),
                ),
                ("reason", models.CharField(blank=True, max_length=500, verbose_name="reason")),
                (
                    "paused_by",
                    models.CharField(blank=True, max_length=150, verbose_name="paused by"),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="paused at"
                    ),
                ),
            ],
            options={
                "verbose_name": "queue pause",
                "verbose_name_plural": "queue pauses",
                "ordering": ["kind"],
                "permissions": [("pause_queue", "Can pause and resume the queue")],
            },
        ),
        migrations.CreateModel(
            name="GateLimit",
            fields=[
                ("id", big_id()),
                # 0018 gives it today's help text (and renames the rows of databases at 0017).
                (
                    "endpoint",
                    models.CharField(
                        help_text="Credentials redacted.",
                        max_length=500,
                        unique=True,
                        verbose_name="endpoint",
                    ),
                ),
                (
                    "limit",
                    models.PositiveIntegerField(
                        help_text="Concurrent calls allowed now.", verbose_name="limit"
                    ),
                ),
                (
                    "rates",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="Completion tokens/s last measured at each limit, as {limit: tokens/s}.",
                        verbose_name="tokens/s by limit",
                    ),
                ),
                ("reason", models.CharField(blank=True, max_length=20, verbose_name="reason")),
                (
                    "changed_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="changed at"
                    ),
                ),
            ],
            options={
                "verbose_name": "gate limit",
                "verbose_name_plural": "gate limits",
                "ordering": ["endpoint"],
            },
        ),
        # Proxies for the admin's pages: no table.
        migrations.CreateModel(
            name="QueueDashboard",
            fields=[],
            options={
                "verbose_name": "queue dashboard",
                "verbose_name_plural": "queue dashboard",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("studyqueue.studyquestionjob",),
        ),
        migrations.CreateModel(
            name="ExplanationReview",
            fields=[],
            options={
                "verbose_name": "explanation review",
                "verbose_name_plural": "explanation reviews",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("studyqueue.explanationrevision",),
        ),
    ]
