"""Shared set-up for the benchmarks: a throwaway database and median reporting."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG_DEFAULT = "postgres://postgres@127.0.0.1:5432/studyqueue_bench"


def setup_django(database: str) -> str:
    """Point Django at a fresh benchmark database (``sqlite`` or ``postgres``) and migrate it."""
    if database == "postgres":
        url = os.environ.get("BENCH_PG_URL", PG_DEFAULT)
        _recreate_pg(url)
    else:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='sq-bench-')}/bench.sqlite3"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def _recreate_pg(url: str) -> None:
    import dj_database_url
    import psycopg

    from studyqueue.queue.pg import psycopg_kwargs

    cfg = dj_database_url.parse(url)
    with psycopg.connect(**psycopg_kwargs(cfg, dbname="postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{cfg["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{cfg["NAME"]}"')


def reset_tables() -> None:
    """Empty the studyqueue tables between runs.

    On PostgreSQL by TRUNCATE: rows deleted run after run leave dead tuples and index
    entries behind faster than autovacuum clears them, and each run would measure a
    more bloated table than the last (seen: 620 -> 280 jobs/s over five runs).
    """
    from django.apps import apps
    from django.db import connection

    from studyqueue.models import StudyQuestion, StudyQuestionJob

    if connection.vendor == "postgresql":
        models = apps.get_app_config("studyqueue").get_models(include_auto_created=True)
        tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY")
        return
    StudyQuestion.objects.update(current_revision=None)
    StudyQuestionJob.objects.all().delete()
    StudyQuestion.objects.all().delete()


def fill_queue(questions: Iterable[Any]) -> None:
    """Empty tables, then ``questions`` (unsaved ``StudyQuestion``s) saved, each with a
    pending job, and the planner's statistics fresh."""
    from studyqueue.models import StudyQuestion
    from studyqueue.queue.enqueue import enqueue_many

    reset_tables()
    StudyQuestion.objects.bulk_create(questions)
    enqueue_many(StudyQuestion.objects.values_list("pk", flat=True))
    analyze()


def analyze() -> None:
    """Fresh planner statistics after filling the tables (PostgreSQL), as the reference
    loop takes for its own table."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def median_of(runs: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    values = [fn() for _ in range(runs)]
    return statistics.median(values), values


_GATE_THREAD: ThreadPoolExecutor | None = None


async def gate_run_db(fn: Callable[..., Any], *args: Any) -> Any:
    """``LLMGate``'s ``run_db`` for a benchmark: its leases on one thread, with one database
    connection, as a consumer's gate thread (the ORM refuses to run on the event loop)."""
    global _GATE_THREAD
    if _GATE_THREAD is None:
        _GATE_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-gate")
    return await asyncio.get_running_loop().run_in_executor(_GATE_THREAD, fn, *args)
