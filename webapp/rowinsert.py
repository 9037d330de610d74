"""The group commit's multi-row ``INSERT ... RETURNING``, sent on the driver's cursor.

SQLAlchemy Core sends a batch of rows as one multi-row INSERT already (its
"insertmanyvalues"), but it processes every row's parameters and every returned row in
Python on the way: a transaction of 30 order rows cost 627 us through Core and 466 us
with the INSERT on the driver's cursor, in the same transaction (SQLite,
docs/performance.md, session 9). That is 5-8 us of every ``atomic`` purchase.

``RowInsert`` renders the statement once per batch size from the table's own columns,
in the driver's placeholder style, and converts each value with the column type's own
bind processor for the dialect (so a datetime is stored in SQLite exactly as Core
would store it). It runs on the Core connection's DBAPI connection, so it is part of
the caller's transaction. A driver error is raised as SQLAlchemy raises it
(``IntegrityError`` for a UNIQUE violation), which is what ``groupcommit.py`` handles.

Only for a driver whose placeholders are positional (``qmark``: sqlite3, ``format`` or
``pyformat``: psycopg); ``for_connection`` answers None otherwise and the caller keeps
the Core statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, Table
from sqlalchemy.exc import DBAPIError

#: placeholder of one value, by DBAPI paramstyle (the positional ones)
_MARKERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}

#: before the first value: no value is the same object as it
_UNSET: Any = object()


class RowInsert:
    """``INSERT INTO table (columns) VALUES (...), ... RETURNING returning`` for one
    dialect; rows are mappings of column name to value."""

    def __init__(self, table: Table, columns: Sequence[str], returning: Sequence[str],
                 dialect: Dialect) -> None:
        self.columns = list(columns)
        self.dialect = dialect
        marker = _MARKERS[dialect.paramstyle]
        processors: list[Callable[[Any], Any] | None] = [
            table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self.columns]
        self._processors = list(zip(self.columns, processors, strict=True))
        quote = dialect.identifier_preparer.quote
        self._head = (f"INSERT INTO {quote(table.name)} "
                      f"({', '.join(quote(name) for name in self.columns)}) VALUES ")
        self._group = "(" + ", ".join([marker] * len(self.columns)) + ")"
        self._tail = f" RETURNING {', '.join(quote(name) for name in returning)}"
        self._sql: dict[int, str] = {}

    @classmethod
    def for_connection(cls, table: Table, columns: Sequence[str], returning: Sequence[str],
                       dialect: Dialect) -> RowInsert | None:
        """A ``RowInsert`` for ``dialect``, or None if its driver's placeholders are not
        positional or it cannot return rows from an INSERT."""
        if dialect.paramstyle not in _MARKERS or not dialect.insert_returning:
            return None
        return cls(table, columns, returning, dialect)

    def sql(self, rows: int) -> str:
        found = self._sql.get(rows)
        if found is None:
            found = self._head + ", ".join([self._group] * rows) + self._tail
            self._sql[rows] = found
        return found

    def execute(self, connection: Connection, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """Insert ``rows`` in ``connection``'s transaction; the returned rows."""
        statement = self.sql(len(rows))
        columns = [[row[name] for row in rows] if process is None
                   else _processed([row[name] for row in rows], process)
                   for name, process in self._processors]
        parameters = [value for values in zip(*columns, strict=True) for value in values]
        cursor = connection.connection.cursor()
        try:
            # what Core fires before a statement: the transaction's deadline listens there
            # (``writedeadline.py``); a multi-row INSERT is the statement a table lock holds
            connection.dispatch.before_cursor_execute(connection, cursor, statement,
                                                      parameters, None, False)
            cursor.execute(statement, parameters)
            return list(cursor.fetchall())
        except self.dialect.loaded_dbapi.Error as exc:  # as Core would raise it
            raise DBAPIError.instance(statement, parameters, exc,
                                      self.dialect.loaded_dbapi.Error,
                                      dialect=self.dialect) from exc
        finally:
            cursor.close()


def _processed(values: list[Any], process: Callable[[Any], Any]) -> list[Any]:
    """``values`` through a column's bind processor (None stays None). A value that is
    the same object as the one before it is converted once: the rows of one batch share
    their ``created_at`` (``takenorders.py``), and SQLite's datetime-to-text conversion
    was ~2.5 us a row."""
    out = []
    last: Any = _UNSET
    done: Any = None
    for value in values:
        if value is not last:
            last, done = value, None if value is None else process(value)
        out.append(done)
    return out
