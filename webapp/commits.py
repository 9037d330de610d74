"""When a write's outcome is unknown: its COMMIT was sent and the reply never came.

A purchase takes its units in Redis and then writes its order; if the write fails, the
units go back (``orders.record_order``). That is right for a write that failed before
its COMMIT, or whose COMMIT the database refused. It is wrong for a COMMIT that reached
PostgreSQL and committed, but whose reply was lost with the connection: the row is
there, and the units given back are sold again (a helper's proxy dropping connections
mid-COMMIT oversold 49 units of 1,200).

``committing`` wraps a transaction's ``begin()`` context and turns a connection error
raised by the COMMIT itself into ``CommitLost``: the one error after which the row must
be looked for (``orders.landed_after_all``). An error of the statements before it, or
of getting a connection, wrote nothing. SQLite commits in this process: its COMMIT
either happened or raised, so it is never in doubt.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

T = TypeVar("T")


class CommitLost(OperationalError):
    """The COMMIT was sent and the connection failed before its reply: the transaction
    may or may not have committed. (An ``OperationalError``: the API answers 503.)"""


def remote(dialect_name: str) -> bool:
    """Whether a COMMIT to this database can be lost on its way back (not SQLite)."""
    return dialect_name != "sqlite"


class committing(Generic[T]):  # noqa: N801 - used like the context manager it wraps
    """``with committing(engine.begin(), remote):`` as ``with engine.begin():``, with a
    lost COMMIT raised as ``CommitLost``."""

    __slots__ = ("_begin", "_remote")

    def __init__(self, begin: Any, remote: bool) -> None:
        self._begin = begin
        self._remote = remote

    def __enter__(self) -> T:
        entered: T = self._begin.__enter__()
        return entered

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> Any:
        if kind is not None or not self._remote:  # the body failed: rolled back
            return self._begin.__exit__(kind, error, tb)
        try:
            return self._begin.__exit__(None, None, None)  # COMMIT
        except (OperationalError, InterfaceError) as exc:
            raise CommitLost(exc.statement, exc.params, exc.orig) from exc
