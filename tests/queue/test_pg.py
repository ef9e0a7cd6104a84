"""Plain psycopg connections (the consumer's LISTEN) on Django's connection parameters."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from django.db import connection

from studyqueue.consumer import scheduler
from studyqueue.queue import notify, pg
from tests.helpers import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def with_options(**options: object) -> dict:
    """The test database's settings with these OPTIONS."""
    return {**connection.settings_dict, "OPTIONS": options}


@pytest.mark.parametrize(
    "key,value",
    [
        ("application_name", "studyqueue-test"),
        ("sslmode", "disable"),
        ("sslrootcert", "/etc/ssl/certs/studyqueue-test-root.crt"),
        ("passfile", "/tmp/studyqueue-test-pgpass"),
        ("connect_timeout", 7),
        ("keepalives_idle", 9),
        ("target_session_attrs", "read-write"),
        ("options", "-c search_path=public"),
    ],
)
def test_every_option_reaches_the_connection(key, value):
    with pg.connect(with_options(**{key: value}), autocommit=True) as conn:
        dsn = psycopg.conninfo.conninfo_to_dict(conn.info.dsn)
        assert str(dsn[key]) == str(value)


def test_the_options_option_is_applied_by_the_server():
    settings = with_options(options="-c search_path=studyqueue_nowhere,public")
    with pg.connect(settings, autocommit=True) as conn:
        assert conn.execute("SHOW search_path").fetchone() == ("studyqueue_nowhere,public",)


def test_a_service_file_names_the_server(tmp_path, monkeypatch):
    settings = connection.settings_dict
    (tmp_path / "pg_service.conf").write_text(
        "[studyqueue_test]\n"
        f"host={settings['HOST'] or '127.0.0.1'}\nport={settings['PORT'] or 5432}\n"
        f"dbname={settings['NAME']}\nuser={settings['USER']}\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "pg_service.conf"))
    service_only = {"NAME": "", "OPTIONS": {"service": "studyqueue_test"}}
    with pg.connect(service_only, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (settings["NAME"],)


def test_sslmode_require_fails_against_a_server_without_tls():
    """The test server has no TLS: the ORM with this OPTIONS fails, so must the listener."""
    with pg.connect(with_options(), autocommit=True) as conn:
        if conn.execute("SHOW ssl").fetchone() != ("off",):
            pytest.skip("this PostgreSQL server has TLS")
    with pytest.raises(psycopg.OperationalError):
        pg.connect(with_options(sslmode="require"), autocommit=True)


def test_options_only_django_reads_are_not_passed_on():
    settings = with_options(
        isolation_level=psycopg.IsolationLevel.SERIALIZABLE,
        server_side_binding=True,
        assume_role="",
        pool=False,
        application_name="studyqueue-test",
    )
    with pg.connect(settings, autocommit=True) as conn:
        assert conn.execute("SHOW application_name").fetchone() == ("studyqueue-test",)


def _listeners(application_name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return [row[0] for row in cursor.fetchall()]


def test_the_consumers_listener_connects_with_the_database_options(make_consumer, caplog):
    """The LISTEN thread itself: it carries OPTIONS (seen by the server) and fails, as the ORM
    would, where they say it must (sslmode=require on a server without TLS)."""
    name = f"studyqueue-listen-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer()
    scheduled = scheduler.ScheduledConsumer(consumer)
    listening = with_options(application_name=name, options="-c search_path=public")
    thread = threading.Thread(
        target=notify.listen,
        args=(listening, scheduled.on_message),
        kwargs={"stopping": consumer.stopping, "wait": consumer.wait},
        daemon=True,
    )
    thread.start()
    try:
        # The connection shows in pg_stat_activity as soon as it is made, before its LISTEN
        # runs: wait for the LISTEN itself.
        wait_for(
            lambda: any(query.startswith("LISTEN ") for query in _listeners(name)),
            timeout=10,
            what="the LISTEN connection to LISTEN",
        )
    finally:
        consumer.request_stop()
        thread.join(timeout=10)
    assert not thread.is_alive()

    refused = make_consumer(worker_id="tls")
    scheduled = scheduler.ScheduledConsumer(refused)
    thread = threading.Thread(
        target=notify.listen,
        args=(with_options(sslmode="require"), scheduled.on_message),
        kwargs={"stopping": refused.stopping, "wait": refused.wait},
        daemon=True,
    )
    with caplog.at_level("WARNING", logger="studyqueue.notify"):
        thread.start()
        wait_for(
            lambda: "study_listen_failed error=OperationalError" in caplog.text,
            timeout=10,
            what="the listener to fail",
        )
    refused.request_stop()
    thread.join(timeout=10)
