"""The pauses a consumer knows of, kept in memory: the last look before an LLM call reads
this instead of the database, because that look sits in the gap between two calls, where
every millisecond is the server's idle time (a read there cost 2.7-4.8 ms of a 10 ms gap on
a loaded machine: a hop to a database thread and back, and the query).

What feeds it: a pause's ``NOTIFY`` (PostgreSQL, milliseconds after the pause commits) and
the cycle's own read of the pauses while claimed jobs wait (twice a second, on any
database). A kind it names is confirmed in the database before a job is held back (a
resume sends no notice of its own, so an entry can outlive its pause); a kind it does not
name lets the call start at once. The operator's guide (docs/operators-guide.md, "Pause and
resume") states what that guarantees.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from studyqueue.queue import transitions as queue


class KnownPauses:
    """The paused kinds (``""``: every kind) as last noticed or read (thread-safe: the
    LISTEN thread notes notices, the consumer's loop reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: frozenset[str] = frozenset()
        self._notices = 0  # bumped by every notice: a read started before one may miss it

    @property
    def kinds(self) -> frozenset[str]:
        return self._kinds

    def may_be_paused(self, kind: str) -> bool:
        """Whether ``kind`` may be paused: True means "confirm in the database"."""
        return queue.is_paused(kind, self._kinds)

    def noticed(self, kind: str) -> None:
        """A pause of ``kind`` was announced (its ``NOTIFY``)."""
        with self._lock:
            self._kinds |= {kind}
            self._notices += 1

    def reading(self) -> int:
        """Call before reading the pauses; hand the result to ``read``."""
        return self._notices

    def read(self, kinds: Iterable[str], *, started: int) -> None:
        """The pauses as a read begun at ``started`` (``reading()``) found them. A notice
        that came during the read is kept: the read may have run before its commit."""
        found = frozenset(kinds)
        with self._lock:
            self._kinds = found if started == self._notices else self._kinds | found
