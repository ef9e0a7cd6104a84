"""The schema studyqueue's migrations make, read back from the database (``tests/
test_migrations.py``): its tables, their columns in order, indexes and constraints as Django's
introspection reads them, and each one's SQL as the database keeps it (SQLite's
``sqlite_master``; PostgreSQL's catalogues, with its functions, triggers and sequences).

``schema_0017.json`` beside this file is this read of a database migrated by the 0.1.0
migrations 0001-0017 (before they were squashed), one entry per database vendor. Written by
``python -m tests.helpers.migration_schema OUT.json`` run in a checkout of 0.1.0 with
``DATABASE_URL`` set (it migrates that database), merged by vendor into the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EXPECTED = Path(__file__).with_name("schema_0017.json")
PREFIX = "studyqueue_"


def snapshot(connection: Any) -> dict[str, Any]:
    """What the studyqueue tables look like in ``connection``'s database, as plain JSON."""
    introspection = connection.introspection
    with connection.cursor() as cursor:
        tables = sorted(t for t in introspection.table_names(cursor) if t.startswith(PREFIX))
        out: dict[str, Any] = {"tables": {}}
        for table in tables:
            columns = [
                {k: v for k, v in column._asdict().items() if k != "collation"}
                for column in introspection.get_table_description(cursor, table)
            ]
            constraints = {
                name: {k: (list(v) if isinstance(v, tuple) else v) for k, v in info.items()}
                for name, info in sorted(introspection.get_constraints(cursor, table).items())
            }
            out["tables"][table] = {"columns": columns, "constraints": constraints}
        out["sql"] = _sql(connection, cursor)
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def _sql(connection: Any, cursor: Any) -> Any:
    """Each object's definition as the database stores it."""
    if connection.vendor == "sqlite":
        cursor.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE tbl_name LIKE %s ORDER BY type, name",
            [PREFIX + "%"],
        )
        return [list(row) for row in cursor.fetchall()]
    queries = {
        # In order, without ordinal_position: PostgreSQL numbers dropped columns too.
        "columns": "SELECT table_name, column_name, data_type,"
        " character_maximum_length, numeric_precision, is_nullable, column_default,"
        " is_identity, identity_generation FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name LIKE %s"
        " ORDER BY table_name, ordinal_position",
        "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = current_schema() AND tablename LIKE %s ORDER BY 1, 2",
        "constraints": "SELECT c.conrelid::regclass::text, c.conname, c.contype,"
        " c.condeferrable, c.condeferred, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " WHERE c.conrelid::regclass::text LIKE %s ORDER BY 1, 2",
        "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)"
        " FROM pg_trigger WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE %s"
        " ORDER BY 1, 2",
        "sequences": "SELECT sequence_name, data_type FROM information_schema.sequences"
        " WHERE sequence_schema = current_schema() AND sequence_name LIKE %s ORDER BY 1",
        # Functions of the schema whatever their name: a migration's RunSQL could add one.
        "functions": "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = current_schema() AND %s = %s ORDER BY 1",
    }
    out = {}
    for name, query in queries.items():
        params = [PREFIX + "%"] if name != "functions" else [1, 1]
        cursor.execute(query, params)
        out[name] = [list(row) for row in cursor.fetchall()]
    return out


def expected(vendor: str) -> dict[str, Any]:
    return json.loads(EXPECTED.read_text())[vendor]


if __name__ == "__main__":  # pragma: no cover - run once, in a checkout of 0.1.0
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", "studyqueue", "0017_job_attempts", verbosity=0)
    path = Path(sys.argv[1])
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored[connection.vendor] = snapshot(connection)
    path.write_text(json.dumps(stored, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
