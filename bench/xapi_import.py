"""xAPI statements in: an LRS export of N sessions of 20 answered statements and a completed
one each, through ``importsessions --format xapi``, then the same file again (nothing new);
and the time of one POST of a session's 21 statements to ``/studyqueue/api/xapi/statements``.

    python -m bench.xapi_import [--db sqlite|postgres] [--sessions 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from io import StringIO

from bench.common import median_of, reset_tables, setup_django

ANSWERED = "http://adlnet.gov/expapi/verbs/answered"
QUESTIONS = 200


def _statements(sessions: int) -> list[dict]:
    """Each session: 20 answers to questions q-0..q-199 by choice number, then completed."""
    out = []
    for n in range(sessions):
        registration = str(uuid.uuid4())
        actor = {"account": {"homePage": "https://app.example", "name": f"learner-{n % 97}"}}
        for k in range(21):
            verb = ANSWERED if k < 20 else "http://adlnet.gov/expapi/verbs/completed"
            statement = {
                "id": str(uuid.uuid4()),
                "actor": actor,
                "verb": {"id": verb},
                "object": {"id": f"https://app.example/questions/q-{(n + k) % QUESTIONS}"},
                "context": {"registration": registration},
                "timestamp": f"2026-12-01T09:{k:02d}:00+09:00",
            }
            if k < 20:
                statement["result"] = {"response": str(1 + k % 4), "duration": f"PT{10 + k}S"}
            out.append(statement)
    return out


def _questions() -> None:
    """A fresh start: the tables emptied (on SQLite ``reset_tables`` leaves sessions), then
    the 200 questions the statements answer."""
    from studyqueue.models import StudyQuestion, StudySession, XapiStatement

    reset_tables()
    XapiStatement.objects.all().delete()
    StudySession.objects.all().delete()
    StudyQuestion.objects.bulk_create(
        StudyQuestion(external_id=f"q-{i}", text=f"문항 {i}", choices=list("ABCD"), answer="A")
        for i in range(QUESTIONS)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    setup_django(args.db)
    from django.core.management import call_command
    from django.test import Client, override_settings

    statements = _statements(args.sessions)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(statements, file)
    again: list[float] = []

    def one_import() -> float:
        _questions()
        started = time.perf_counter()
        call_command("importsessions", file.name, "--format", "xapi", stdout=StringIO())
        took = time.perf_counter() - started
        started = time.perf_counter()
        call_command("importsessions", file.name, "--format", "xapi", stdout=StringIO())
        again.append(time.perf_counter() - started)
        return took

    median, runs = median_of(args.runs, one_import)
    print(
        f"db={args.db} statements={len(statements)} sessions={args.sessions}"
        f" import_s={median:.2f} (runs: {', '.join(f'{r:.2f}' for r in runs)})"
        f" statements_per_s={len(statements) / median:.0f}"
        f" again_s={statistics.median(again):.2f}"
    )
    _questions()
    statements = _statements(100)  # new ones: each POST records a session
    client, posts = Client(), []
    headers = {"HTTP_AUTHORIZATION": "Bearer bench", "HTTP_X_EXPERIENCE_API_VERSION": "1.0.3"}
    with override_settings(STUDYQUEUE={"API_TOKENS": "bench"}, ALLOWED_HOSTS=["testserver"]):
        for n in range(min(args.sessions, 100)):
            body = json.dumps(statements[21 * n : 21 * (n + 1)])
            started = time.perf_counter()
            response = client.post(
                "/studyqueue/api/xapi/statements", body, "application/json", **headers
            )
            posts.append(time.perf_counter() - started)
            assert response.status_code == 200, response.content
    posts.sort()
    print(
        f"POST of one session's 21 statements: p50_ms={1000 * statistics.median(posts):.1f}"
        f" p90_ms={1000 * posts[int(len(posts) * 0.9)]:.1f} (n={len(posts)})"
    )


if __name__ == "__main__":
    main()
