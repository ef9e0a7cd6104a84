"""Exit 0 if the PostgreSQL server behind a DATABASE_URL accepts connections."""

from __future__ import annotations

import sys

import dj_database_url
import psycopg


def main() -> int:
    cfg = dj_database_url.parse(sys.argv[1])
    try:
        psycopg.connect(
            dbname="postgres",
            user=cfg.get("USER") or None,
            password=cfg.get("PASSWORD") or None,
            host=cfg.get("HOST") or None,
            port=cfg.get("PORT") or None,
            connect_timeout=3,
        ).close()
    except psycopg.Error:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
