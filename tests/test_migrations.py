"""The migrations of 0.2.0: ``0001_squashed_0017_job_attempts`` (0.1.0's 0001-0017 in one,
``replaces`` kept), ``0018_gate_limit_endpoint_names``, ``0019_key_audit``, ``0020_verifier``,
``0021_endpoint_pool`` and every later one.

A new database migrates to the end and matches the models; the squashed migration makes the
schema 0.1.0's migrations made (``tests/helpers/schema_0017.json``, read from databases
migrated by them); a database 0.1.0 left at 0017 runs 0018 to 0020 only, its rows kept; a
database at an earlier migration is refused (it upgrades through 0.1.0 first). Both databases."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from typing import Any

import django
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.exceptions import NodeNotFoundError
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

import studyqueue
from studyqueue.models import ExplanationRevision, GateLimit, StudyQuestion, StudyQuestionJob
from tests.helpers.migration_schema import expected, snapshot

# The Django release the stored schema (tests/helpers/schema_0017.json) was read with: its
# SQL text is compared on that release only (6.1 writes a partial index's condition
# ``WHERE "candidate"`` as ``WHERE "candidate" = 1``); tables, columns, indexes and
# constraints are compared on every release.
SCHEMA_READ_WITH = (5, 2)

pytestmark = pytest.mark.django_db(transaction=True)

APP = "studyqueue"
SQUASHED = (APP, "0001_squashed_0017_job_attempts")
GATE_NAMES = (APP, "0018_gate_limit_endpoint_names")
KEY_AUDIT = (APP, "0019_key_audit")
VERIFIER = (APP, "0020_verifier")
ENDPOINT_POOL = (APP, "0021_endpoint_pool")
# What migrating to the end records after the squashed migration: every later one, in order.
AFTER_SQUASH = sorted(
    path.stem
    for path in (Path(studyqueue.__file__).parent / "migrations").glob("0*.py")
    if path.stem != SQUASHED[1]
)
OLD_NAMES = [  # what django_migrations holds for studyqueue on a 0.1.0 database
    "0001_initial",
    "0002_admin_indexes_and_dashboard",
    "0003_job_free_releases",
    "0004_question_choices_validated",
    "0005_consumers_pauses_llm_timing",
    "0006_explanation_revisions",
    "0007_existing_explanations_as_revisions",
    "0008_question_external_id",
    "0009_question_changed",
    "0010_reply_metadata_on_the_revision",
    "0011_cached_tokens_decode_rate",
    "0012_field_labels",
    "0013_revision_stated_answer",
    "0014_review",
    "0015_gate_limit",
    "0016_consumer_writes_with",
    "0017_job_attempts",
]


def recorded() -> list[str]:
    """The studyqueue migrations django_migrations records, in name order."""
    return sorted(MigrationRecorder(connection).migration_qs.filter(app=APP).values_list(
        "name", flat=True
    ))  # fmt: skip


def record_exactly(names: list[str]) -> None:
    """Make django_migrations record ``names`` for studyqueue, and nothing else of it."""
    recorder = MigrationRecorder(connection)
    recorder.migration_qs.filter(app=APP).delete()
    for name in names:
        recorder.record_applied(APP, name)


def migrate(target: list[tuple[str, str]]) -> Any:
    """Migrate the test database to ``target``; the historical apps at that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    executor.loader.build_graph()
    return executor.loader.project_state(target).apps


def leaves() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


# --------------------------------------------------------------------------- a new database


def test_a_new_database_migrates_to_the_end_and_matches_the_models():
    call_command("migrate", APP, "zero", verbosity=0)
    assert APP + "_studyquestion" not in connection.introspection.table_names()
    out = io.StringIO()
    call_command("migrate", APP, verbosity=1, stdout=out)
    assert f"Applying {APP}.{SQUASHED[1]}... OK" in out.getvalue()
    assert f"Applying {APP}.{GATE_NAMES[1]}... OK" in out.getvalue()
    # The squashed migration is recorded under its own name and the names it replaces.
    assert recorded() == sorted([*OLD_NAMES, SQUASHED[1], *AFTER_SQUASH])
    call_command("makemigrations", APP, check=True, dry_run=True, verbosity=0)  # exits if not


def _based_on_last(schema: dict[str, Any]) -> dict[str, Any]:
    """SQLite: ``ExplanationRevision.based_on`` moved to the table's end. 0.1.0 added it by
    ``ALTER TABLE … ADD COLUMN`` (0014) and SQLite appends; PostgreSQL too, but a later
    remake of the table in 0014 put it back among the columns there. The squashed migration
    creates the table with the columns in the models' order (PostgreSQL's); on SQLite the
    one column stands elsewhere and nothing else differs."""
    table = schema["tables"]["studyqueue_explanationrevision"]
    (column,) = [c for c in table["columns"] if c["name"] == "based_on_id"]
    table["columns"] = [c for c in table["columns"] if c is not column] + [column]
    definition = (
        '"based_on_id" bigint NULL REFERENCES "studyqueue_explanationrevision" ("id")'
        " DEFERRABLE INITIALLY DEFERRED"
    )
    for row in schema["sql"]:
        if row[:2] == ["table", "studyqueue_explanationrevision"]:
            assert definition + ", " in row[3], row[3]
            sql = row[3].replace(definition + ", ", "")
            row[3] = sql.replace(", CONSTRAINT ", f", {definition}, CONSTRAINT ", 1)
    return schema


def test_the_squashed_migration_makes_the_schema_of_0_1_0s_migrations():
    """Tables, columns (types, nulls, database defaults), indexes (partial ones with their
    conditions), constraints (names, checks, the one active job), and on PostgreSQL its
    sequences, functions and triggers: as migrations 0001-0017 left them (up to 0018, which
    changes no schema; 0019 and 0020 add to it)."""
    call_command("migrate", APP, "zero", verbosity=0)
    call_command("migrate", APP, GATE_NAMES[1], verbosity=0)
    now = snapshot(connection)
    if connection.vendor == "sqlite":
        now = _based_on_last(now)
    was = expected(connection.vendor)
    assert sorted(now["tables"]) == sorted(was["tables"])
    for table in was["tables"]:  # one table at a time: a short diff on failure
        assert now["tables"][table] == was["tables"][table], table
    if django.VERSION[:2] == SCHEMA_READ_WITH:  # the SQL's wording is the release's own
        assert now["sql"] == was["sql"]


# --------------------------------------------------------------------------- 0.1.0's databases


def test_0018_depends_on_the_squashed_migration_in_place_of_0017():
    """0018 names ``0017_job_attempts``: with 0017 gone from disk, Django's loader replaces
    the squashed migration's ``replaces`` by it in the graph (``remove_replaced_nodes``), and
    0018's dependency with them."""
    loader = MigrationLoader(connection)
    assert loader.get_migration(*GATE_NAMES).dependencies == [(APP, "0017_job_attempts")]
    assert set(loader.replacements) == {SQUASHED}
    assert loader.graph.node_map[GATE_NAMES].parents == {loader.graph.node_map[SQUASHED]}
    assert (APP, "0017_job_attempts") not in loader.graph.node_map
    assert loader.graph.forwards_plan(GATE_NAMES) == [SQUASHED, GATE_NAMES]


def test_a_0_1_0_database_at_0017_runs_only_the_later_migrations_and_keeps_its_rows():
    """A database as 0.1.0 left it: the schema of 0017, the 17 old names recorded (not the
    squashed one, which 0.1.0 never had), rows in it, a gate limit under a URL spelled the old
    way. ``migrate`` marks the squashed migration applied without running it, runs 0018
    (which renames the limit), and every row reads the same."""
    apps = migrate([SQUASHED])  # the schema of 0017 (0018 unapplied: it adds nothing to it)
    record_exactly(OLD_NAMES)
    assert recorded() == sorted(OLD_NAMES)

    question_model = apps.get_model(APP, "StudyQuestion")
    job_model = apps.get_model(APP, "StudyQuestionJob")
    revision_model = apps.get_model(APP, "ExplanationRevision")
    now = timezone.now()
    q1 = question_model.objects.create(text="2 + 2?", choices=["3", "4"], answer="4")
    q2 = question_model.objects.create(text="Capital of France?", external_id="geo-1")
    done = job_model.objects.create(
        study_question=q1, kind="explanation", status="completed", attempts=1,
        max_attempts=3, completed_at=now, llm_ms=900,
    )  # fmt: skip
    revision = revision_model.objects.create(
        question=q1, job=done, text="Four.", model="m1", prompt_version="v1",
        completion_tokens=20, tokens_per_second=47.5, finish_reason="stop", stated_answer="4",
    )  # fmt: skip
    job_model.objects.filter(pk=done.pk).update(revision=revision)
    question_model.objects.filter(pk=q1.pk).update(current_revision=revision, explanation="Four.")
    pending = job_model.objects.create(study_question=q2, kind="explanation", max_attempts=3)
    apps.get_model(APP, "GateLimit").objects.create(
        endpoint="http://[redacted]@LOCALHOST:8080/v1/", limit=3, rates={"3": 30.0}
    )

    executor = MigrationExecutor(connection)
    assert executor.loader.applied_migrations.keys() >= {SQUASHED}  # from the 17 names
    plan = [(m.app_label, m.name) for m, _ in executor.migration_plan(leaves())]
    assert plan == [(APP, name) for name in AFTER_SQUASH]
    assert AFTER_SQUASH[:4] == [GATE_NAMES[1], KEY_AUDIT[1], VERIFIER[1], ENDPOINT_POOL[1]]
    out = io.StringIO()
    call_command("migrate", APP, verbosity=1, stdout=out)
    assert f"Applying {APP}.{GATE_NAMES[1]}... OK" in out.getvalue()
    assert SQUASHED[1] not in out.getvalue()  # recorded, never run
    assert recorded() == sorted([*OLD_NAMES, SQUASHED[1], *AFTER_SQUASH])

    assert [row.endpoint for row in GateLimit.objects.all()] == ["http://127.0.0.1:8080/v1"]
    assert GateLimit.objects.get().limit == 3
    first = StudyQuestion.objects.get(pk=q1.pk)
    assert (first.text, first.choices, first.answer) == ("2 + 2?", ["3", "4"], "4")
    assert (first.key_audit, first.key_audit_samples, first.key_check) == ("", [], "")
    assert first.current_revision_id == revision.pk and first.explanation == "Four."
    assert StudyQuestion.objects.get(pk=q2.pk).external_id == "geo-1"
    assert StudyQuestionJob.objects.get(pk=done.pk).revision_id == revision.pk
    assert StudyQuestionJob.objects.get(pk=pending.pk).status == "pending"
    stored = ExplanationRevision.objects.get(pk=revision.pk)
    assert (stored.text, stored.stated_answer, stored.review_status) == ("Four.", "4", "unreviewed")


def test_a_database_before_0017_is_refused():
    """Not supported by 0.2.0 (the squashed migration cannot run over part of it): Django
    stops at loading the migrations, naming the missing 0017; nothing runs. Such a database
    migrates with 0.1.0 first."""
    record_exactly(OLD_NAMES[:10])  # 0.1.0's code at 0010
    try:
        with pytest.raises(NodeNotFoundError, match="0017_job_attempts"):
            MigrationLoader(connection)
    finally:
        record_exactly([*OLD_NAMES, SQUASHED[1], *AFTER_SQUASH])
    assert MigrationExecutor(connection).migration_plan(leaves()) == []


def test_0018s_copy_of_endpoint_name_names_as_the_gate_does():
    """0018 carries its own copy of ``endpoint_name`` (a migration imports no app code that
    may move): it names a stored limit as the running gate looks it up."""
    from studyqueue.services.endpoints import endpoint_name

    migration = importlib.import_module("studyqueue.migrations.0018_gate_limit_endpoint_names")
    for url in (
        "http://[redacted]@LOCALHOST:8080/v1/",
        "https://other:443/v1/",
        "HTTP://user:pw@Host:80/x/?q=1#f",
        "http://[::1]:8000/v1",
        "http://host:notaport/v1/",
        " not a url/ ",
    ):
        assert migration.endpoint_name(url) == endpoint_name(url), url
