"""Import and export at scale: 100,000 questions imported from JSON Lines, and the export of
100,000 vs 1,000,000 explained questions with the peak memory of each (it must stay flat).

    python -m bench.import_export [--rows 100000] [--export-rows 1000000] [--runs 3]

PostgreSQL. The import runs ``manage.py importquestions`` in-process on a fresh table each
run; the export runs ``manage.py exportexplanations --output /dev/null`` in a process of its
own, whose peak RSS (ru_maxrss) is read back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import ROOT, reset_tables, setup_django

PEAK = (
    "import resource, django; django.setup();"
    "from django.core.management import call_command;"
    "call_command('exportexplanations', '--output', '/dev/null', stderr=open(os.devnull, 'w'));"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def _fill_explained(rows: int) -> None:
    from django.db import connection

    reset_tables()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO studyqueue_studyquestion (text, choices, answer, explanation,"
            " created_at, updated_at)"
            " SELECT 'question ' || g, '[\"a\", \"b\"]', 'a',"
            " repeat('An explanation of some length. ', 20), now(), now()"
            " FROM generate_series(1, %s) g",
            [rows],
        )
        # Each explanation's current revision: the export reads the model and time there.
        cursor.execute(
            "INSERT INTO studyqueue_explanationrevision (question_id, text, model, prompt_version,"
            " prompt_label, finish_reason, flags, created_at)"
            " SELECT id, explanation, 'm', '', '', 'stop', '[]', now()"
            " FROM studyqueue_studyquestion"
        )
        cursor.execute(
            "UPDATE studyqueue_studyquestion q SET current_revision_id = r.id"
            " FROM studyqueue_explanationrevision r WHERE r.question_id = q.id"
        )
        cursor.execute("ANALYZE studyqueue_studyquestion")


def _export_peak_kb(url: str) -> tuple[int, float]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "project.settings"}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", "import os;" + PEAK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1]), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--export-rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    url = setup_django("postgres")
    from django.core.management import call_command

    path = os.path.join(tempfile.mkdtemp(), "questions.jsonl")
    with open(path, "w") as out:
        for i in range(args.rows):
            record = {"text": f"Question {i}?", "choices": ["a", "b"], "answer": "a"}
            out.write(json.dumps({**record, "external_id": f"q{i}"}) + "\n")
    times = []
    with open(os.devnull, "w") as quiet:
        for _ in range(args.runs):
            reset_tables()
            started = time.perf_counter()
            call_command("importquestions", path, stdout=quiet, stderr=quiet)
            times.append(time.perf_counter() - started)
    median = statistics.median(times)
    print(
        f"import rows={args.rows} median_s={median:.1f} rows_per_s={args.rows / median:.0f}"
        f" runs_s=[{', '.join(f'{t:.1f}' for t in times)}] target: well under 60 s"
    )
    small = args.export_rows // 10
    for rows in (small, args.export_rows):
        _fill_explained(rows)
        peak_kb, seconds = _export_peak_kb(url)
        print(f"export rows={rows} peak_rss_mb={peak_kb / 1024:.0f} seconds={seconds:.1f}")
    print("target: the peak for 10x the rows stays flat")


if __name__ == "__main__":
    main()
