"""The query-count guard: what a job costs the database on its whole path (claim → LLM call
against the real test server → store), statement by statement, on SQLite and PostgreSQL.

A feature that adds a query per job fails here; if the query is worth it, add it to
``PER_JOB`` or ``PER_GATE`` below with the reason. Cycle bookkeeping (the stale scan, the consumer's
reports, the next-due time) is per cycle, not per job, and not counted here.
"""

from __future__ import annotations

import pytest
from django.db import connection

from studyqueue.models import StudyQuestion
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory
from tests.helpers.queries import QueryLog

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM = "UPDATE studyqueue_studyquestionjob SET status = 'processing'"
OPEN_ATTEMPT = "INSERT INTO studyqueue_jobattempt"
REVISION = 'INSERT INTO "studyqueue_explanationrevision"'
FINISH = "WITH job AS (UPDATE studyqueue_studyquestionjob"
QUESTION = 'SELECT "studyqueue_studyquestion"'
GATE_THREAD = "studyqueue-gate"  # the consumer's gate executor (its thread names)

BOTH, PG, SQLITE = ("postgresql", "sqlite"), ("postgresql",), ("sqlite",)
# On the gate's connection, in order: (what, the statement's start, on which databases). The
# gate has a connection of its own so that none of these, in the gap between two LLM calls,
# queues behind another job's store. The last look at the pauses inside the gate reads what
# the consumer knows of them (``Unstarted.pauses``), not the database: no query.
LEASE = 'UPDATE "studyqueue_gatelease"'
PER_GATE = [
    ("take a gate slot: one update of its lease", LEASE, BOTH),
    ("the call is over: give the slot back", LEASE, BOTH),
]  # fmt: skip
# Once per consumer, before its first take: its previous run's leases freed, the slot's row.
FIRST_GATE = [
    ("free the leases a previous run under this worker id held", LEASE, BOTH),
    ("the slot's lease row, if none yet", 'INSERT INTO "studyqueue_gatelease"', PG),
    ("the slot's lease row, if none yet", 'INSERT OR IGNORE INTO "studyqueue_gatelease"', SQLITE),
]  # fmt: skip
# On the consumer's job connection, in order.
PER_JOB = [
    # store(), one transaction:
    ("re-read the question: changed during the call?", QUESTION, BOTH),
    ("the new revision with the reply's metadata", REVISION, BOTH),
    # every attempt is kept, closed with the job's completion: on PostgreSQL in
    # the same statement (WITH job AS (UPDATE …) UPDATE attempt), on SQLite one more.
    ("complete the job and close its attempt (fenced)", FINISH, PG),
    ("complete the job, pointing at it (fenced)", "UPDATE studyqueue_studyquestionjob SET", SQLITE),
    ("close its attempt with the reply's tokens", 'UPDATE "studyqueue_jobattempt"', SQLITE),
    ("the question's current explanation", 'UPDATE "studyqueue_studyquestion"', BOTH),
]  # fmt: skip
# Transaction control is not a query of its own (SQLite's atomic() runs BEGIN IMMEDIATE).
TRANSACTION_CONTROL = ("BEGIN", "SAVEPOINT", "RELEASE SAVEPOINT", "COMMIT", "ROLLBACK")


def expected(per: list[tuple[str, str, tuple[str, ...]]]) -> list[tuple[str, str]]:
    return [(what, start) for what, start, vendors in per if connection.vendor in vendors]


def named(statements: list[str], wanted: list[tuple[str, str]]) -> list[str]:
    """The statements, each as its ``wanted`` name where it is the one wanted at its
    place, else as its SQL (what the failure shows)."""
    names = []
    for i, sql in enumerate(statements):
        if i < len(wanted) and sql.startswith(wanted[i][1]):
            names.append(wanted[i][0])
        else:
            names.append(sql[:160])
    return names


def queries(sqls: list[str]) -> list[str]:
    return [s for s in sqls if not s.lstrip().upper().startswith(TRANSACTION_CONTROL)]


@pytest.fixture
def quiet_settings(settings, llm_server):
    """One job in flight behind one gate slot; no heartbeat or report comes due mid-job."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 1,
        "BATCH_SIZE": 1,
        "HEARTBEAT_SECONDS": 3600,
        "STALE_MINUTES": 240,
        "INTERVAL_SECONDS": 3600,
        "VERIFY": False,  # one explanation job alone (its check is a job of its own)
        "STEP_CHECK": False,
    }


def _claim(sql: str) -> bool:
    return CLAIM in sql or sql.startswith("EXECUTE studyqueue_")


def test_a_job_costs_one_claim_and_a_fixed_set_of_queries(quiet_settings, make_consumer):
    questions = [
        StudyQuestionFactory(text=f"What is {n} + {n}?", choices=["3", "4"], answer="4")
        for n in range(2)
    ]
    with QueryLog() as log:
        # The consumer is made inside the log: its connections are seen from the first.
        consumer = make_consumer()
        # One job per cycle: a warm path costs the same, and so does a regeneration (the
        # first question again, now with a current explanation whose review is read with it).
        for n, question in enumerate([*questions, questions[0]]):
            enqueue(question)
            assert consumer.run_cycle().outcomes == {"completed": 1}
            per_connection = {
                conn: [" ".join(sql.split()) for sql in sqls]  # one line each
                for conn, sqls in log.by_connection().items()
            }
            gates = list({q.connection for q in log.queries if q.thread.startswith(GATE_THREAD)})
            log.queries.clear()
            claims = [c for c, sqls in per_connection.items() if any(_claim(s) for s in sqls)]
            jobs = [c for c, sqls in per_connection.items() if any(REVISION in s for s in sqls)]
            # The claims, the jobs and the gate keep their own connections (neither a claim
            # nor a gate operation queues behind a job's write).
            assert len(claims) == len(jobs) == len(gates) == 1
            assert len({claims[0], jobs[0], gates[0]}) == 3

            # The claim: one statement takes and marks the job. The cycle also claims when
            # its second place in flight is free and when the job ends; both come back
            # empty here (one job), and in a backlog they are the next jobs' claims. On
            # PostgreSQL the consumer's first claim prepares it (PREPARE, once per session),
            # and every claim runs it (EXECUTE).
            claim_sqls = [s for s in per_connection[claims[0]] if _claim(s)]
            prepares = [s for s in claim_sqls if s.startswith("PREPARE ")]
            assert len(claim_sqls) - len(prepares) == 3
            # The job's read of its question, on the claims' connection too (on the jobs'
            # it waited behind the previous job's store), with the claim that took it.
            loads = [s for s in per_connection[claims[0]] if s.startswith(QUESTION)]
            assert len(loads) == 1
            # The claim opens the job's attempt: on PostgreSQL inside the claim statement
            # (WITH … INSERT), on SQLite one INSERT after a claim that took a job (in its
            # transaction); an empty claim costs nothing more.
            opened = [s for s in per_connection[claims[0]] if s.startswith(OPEN_ATTEMPT)]
            if connection.vendor == "postgresql":
                assert opened == [] and all(OPEN_ATTEMPT in s for s in prepares)
                assert len(prepares) == (1 if n == 0 else 0)
            else:
                assert len(opened) == 1

            job_queries = queries(per_connection[jobs[0]])
            assert named(job_queries, expected(PER_JOB)) == [w for w, _ in expected(PER_JOB)]
            gate_queries = queries(per_connection[gates[0]])
            per_gate = expected((FIRST_GATE if n == 0 else []) + PER_GATE)
            assert named(gate_queries, per_gate) == [w for w, _ in per_gate]
    assert StudyQuestion.objects.exclude(explanation="").count() == 2


def test_a_backlog_drained_in_one_cycle_takes_the_gates_lease_once(
    quiet_settings, make_consumer, llm_server
):
    """Jobs back to back keep the slot's lease between their calls (handed over to the next
    job, waiting at the gate through a call of 0.2 s): one take and one give-back for the
    whole cycle, not one of each per job."""
    llm_server.configure(delay=0.2)
    for n in range(4):
        enqueue(StudyQuestionFactory(text=f"What is {n} + {n}?", choices=["3", "4"], answer="4"))
    with QueryLog() as log:
        consumer = make_consumer()
        assert consumer.run_cycle().outcomes == {"completed": 4}
        gate_sqls = [
            " ".join(q.sql.split()) for q in log.queries if q.thread.startswith(GATE_THREAD)
        ]
    per_gate = expected(FIRST_GATE + PER_GATE)
    assert named(queries(gate_sqls), per_gate) == [w for w, _ in per_gate]
