"""Exit 0 if the PostgreSQL server behind a DATABASE_URL accepts connections."""

from __future__ import annotations

import sys

import dj_database_url
import psycopg

from studyqueue.queue.pg import psycopg_kwargs


def main() -> int:
    cfg = dj_database_url.parse(sys.argv[1])
    try:
        psycopg.connect(**psycopg_kwargs(cfg, dbname="postgres"), connect_timeout=3).close()
    except psycopg.Error:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
