"""``QueryLog``: every query on one database alias, from every thread, while it is open."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


@dataclass(frozen=True)
class Query:
    """One statement: which connection object ran it (``id()``), on which thread."""

    connection: int
    thread: str
    sql: str


class QueryLog:
    """Log the queries of database ``alias`` run while the block is open: on this thread's
    connection, and on every connection another thread opens meanwhile (Django's
    ``connection_created`` signal, then ``execute_wrapper``), so the threads of a consumer
    made inside the block are seen whatever their number. A connection another thread
    opened before the block is not seen: make the consumer inside it."""

    def __init__(self, alias: str = "default") -> None:
        self.alias = alias
        self.queries: list[Query] = []
        self._lock = threading.Lock()
        self._wrapped: set[int] = set()
        self._stack = contextlib.ExitStack()

    def _record(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        connection = context["connection"]
        with self._lock:
            self.queries.append(Query(id(connection), threading.current_thread().name, sql))
        return execute(sql, params, many, context)

    def _wrap(self, connection: BaseDatabaseWrapper) -> None:
        with self._lock:
            if id(connection) in self._wrapped:
                return
            self._wrapped.add(id(connection))
        self._stack.enter_context(connection.execute_wrapper(self._record))

    def _created(self, sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if connection.alias == self.alias:
            self._wrap(connection)

    def __enter__(self) -> QueryLog:
        connection_created.connect(self._created, weak=False)
        self._wrap(connections[self.alias])
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        connection_created.disconnect(self._created)
        self._stack.close()

    def by_connection(self) -> dict[int, list[str]]:
        """The statements of each connection, in order."""
        grouped: dict[int, list[str]] = {}
        for query in self.queries:
            grouped.setdefault(query.connection, []).append(query.sql)
        return grouped
