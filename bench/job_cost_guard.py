"""Fail loudly when a change adds more than 20 % to a job's cost on the real path.

    python -m bench.job_cost_guard [--base origin/main] [--rounds 5] [--jobs 200] [--db sqlite]

Runs ``bench.job_overhead``'s real path (``runconsumer --drain`` against an instant server)
on the base commit (checked out in a temporary worktree) and on this tree, alternately, in
the same run: on a shared, noisy machine only a ratio measured side by side holds. Prints
each round and the medians, and exits 1 when this tree's median per job exceeds the base's by
more than ``--limit`` (default 1.2).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL_PATH = re.compile(r"real path \(runconsumer --drain\)\s+([\d.]+) ms")


def per_job_ms(tree: Path, db: str, jobs: int) -> float:
    """One run of the real path in ``tree`` (its own code first on the path), ms per job."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.job_overhead",
            "--db",
            db,
            "--jobs",
            str(jobs),
            "--runs",
            "1",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = REAL_PATH.search(out)
    if found is None:
        raise SystemExit(f"no real-path figure in the bench's output:\n{out}")
    return float(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="origin/main", help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--limit", type=float, default=1.2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sq-guard-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base), args.base], cwd=ROOT, check=True
        )
        try:
            runs: dict[str, list[float]] = {"base": [], "head": []}
            for n in range(args.rounds):
                runs["base"].append(per_job_ms(base, args.db, args.jobs))
                runs["head"].append(per_job_ms(ROOT, args.db, args.jobs))
                base_ms, head_ms = runs["base"][-1], runs["head"][-1]
                print(f"round {n + 1}: base {base_ms:.2f} ms, this tree {head_ms:.2f} ms")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=True
            )
    base_ms, head_ms = statistics.median(runs["base"]), statistics.median(runs["head"])
    ratio = head_ms / base_ms
    print(f"median per job: base ({args.base}) {base_ms:.2f} ms, this tree {head_ms:.2f} ms")
    print(f"ratio: {ratio:.2f}x")
    if ratio > args.limit:
        print(f"FAILED: a job costs {ratio:.2f}x the base's, over the {args.limit:.2f}x limit")
        raise SystemExit(1)
    print(f"ok: within {args.limit:.2f}x")


if __name__ == "__main__":
    main()
