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

**A database that says nothing.** ``statement_timeout`` and the write's deadline
(``writedeadline.py``) are enforced by the server; one that has stopped answering with
its network up (a frozen backend, a pooler queueing its clients: the kernel acknowledges
what we send, so neither ``tcp_user_timeout`` nor the keepalives fire) enforces
nothing, and a buyer waited for as long as it said nothing (a PostgreSQL audit: 41 s
for 40 s of silence). Given its deadline (``at``), in a gevent worker ``committing``
gives the write up itself ``SLACK_S + NO_ANSWER_S`` after it: before the COMMIT was
sent, as ``NoAnswer`` (nothing can commit: the connection is dropped, and a server
rolls back what a gone client left open); during the COMMIT, as ``CommitLost``.
``answered_within`` bounds the look for a row in doubt the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

from .batching import gevent_patched
from .writedeadline import NO_ANSWER_S, SLACK_S

T = TypeVar("T")


class CommitLost(OperationalError):
    """The COMMIT was sent and the connection failed before its reply: the transaction
    may or may not have committed. (An ``OperationalError``: the API answers 503.)"""


class NoAnswer(OperationalError):
    """The database said nothing in time, before any COMMIT was sent: nothing was
    written. (An ``OperationalError``: the API answers 503.)"""


class _Unanswered(BaseException):
    """A gevent timer's exception, raised in the greenlet waiting on the database. A
    BaseException, as gevent's own: SQLAlchemy then discards the connection it
    interrupted rather than pooling it (``api._Silent`` does the same)."""


def _silence(seconds: float) -> str:
    return f"the database did not answer in {seconds:.1f} s"


def _silence_timer(seconds: float) -> tuple[_Unanswered, Any] | None:
    """A started gevent timer that raises its own ``_Unanswered`` in ``seconds`` in the
    greenlet waiting; None outside a gevent worker (a sync worker's waits cannot be
    interrupted)."""
    if not gevent_patched("socket"):
        return None
    from gevent import Timeout

    silent = _Unanswered()
    timer = Timeout(max(seconds, 0.0), silent)
    timer.start()
    return silent, timer


def came_of(error: BaseException | None, match: Callable[[BaseException], bool]) -> bool:
    r"""Whether ``error``, or an error it was raised over (its cause or context, ten
    deep at most), ``match``\ es: a time limit's exception. SQLAlchemy, cleaning up the
    connection the limit interrupted (a ``pool_pre_ping`` mid-query), may raise an error
    of its own over it (a PostgreSQL audit: a silent database answered 503 "the database
    refused the request", ``ProgrammingError``; ``/healthz`` said so too)."""
    for _ in range(10):
        if error is None:
            return False
        if match(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _from(error: BaseException | None, silent: BaseException | None) -> bool:
    """Whether ``error`` is the timer's ``silent``, or came of it (``came_of``)."""
    return came_of(error, lambda found: found is silent)


#: a read a request waits on (the buyer's earlier order, a product for a view), at most
#: this long from a database that says nothing, in a gevent worker: none bounded them,
#: and keyed purchases and product views waited out a 45 s silence (a PostgreSQL audit).
#: The wait for a pooled connection is in it: as long as that one's (``POOL_TIMEOUT_S``),
#: so a busy pool is no "did not answer" sooner than before (a review)
READ_S = 10.0


@contextlib.contextmanager
def reading(sessions: Any) -> Iterator[None]:
    """``answered_within(READ_S)`` for a read through ``sessions`` (a sessionmaker)."""
    name = getattr(getattr(sessions.kw.get("bind"), "dialect", None), "name", "sqlite")
    with answered_within(READ_S, remote(name)):
        yield


@contextlib.contextmanager
def answered_within(seconds: float, remote: bool) -> Iterator[None]:
    """Run the block's waits on a remote database (``remote``) for ``seconds`` at most
    in a gevent worker, else raise ``NoAnswer``; elsewhere, no limit (a sync worker's
    waits cannot be interrupted, and SQLite waits in C)."""
    started = _silence_timer(seconds) if remote else None
    if started is None:
        yield
        return
    silent, timer = started
    try:
        yield
    except BaseException as exc:
        if not _from(exc, silent):
            raise
        raise NoAnswer(None, None, TimeoutError(_silence(seconds))) from None
    finally:
        timer.close()


def remote(dialect_name: str) -> bool:
    """Whether a COMMIT to this database can be lost on its way back (not SQLite)."""
    return dialect_name != "sqlite"


class committing(Generic[T]):  # noqa: N801 - used like the context manager it wraps
    """``with committing(engine.begin(), remote):`` as ``with engine.begin():``, with a
    lost COMMIT raised as ``CommitLost``; given ``at`` (the write's deadline,
    ``time.monotonic()``), a database silent past it as ``NoAnswer`` or ``CommitLost``
    (module docstring)."""

    __slots__ = ("_begin", "_remote", "_at", "_silent", "_timer")

    def __init__(self, begin: Any, remote: bool, at: float | None = None) -> None:
        self._begin = begin
        self._remote = remote
        self._at = at
        self._silent: _Unanswered | None = None
        self._timer: Any = None

    def __enter__(self) -> T:
        if self._at is not None and self._remote:
            started = _silence_timer(self._at + SLACK_S + NO_ANSWER_S - time.monotonic())
            if started is not None:
                self._silent, self._timer = started
        try:
            entered: T = self._begin.__enter__()  # (a connection from the pool)
        except BaseException as exc:
            self._stop()
            if self._ours(exc):
                raise self._no_answer() from None
            raise
        return entered

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> Any:
        try:
            if kind is not None or not self._remote:  # the body failed: rolled back
                try:
                    ended = self._begin.__exit__(kind, error, tb)
                except BaseException as exc:
                    if self._ours(exc) or self._ours(error):
                        raise self._no_answer() from None
                    raise
                if self._ours(error):  # the body was interrupted: nothing was committed
                    raise self._no_answer() from None
                return ended
            try:
                return self._begin.__exit__(None, None, None)  # COMMIT
            except (OperationalError, InterfaceError) as exc:
                raise CommitLost(exc.statement, exc.params, exc.orig) from exc
            except BaseException as exc:
                if self._ours(exc):  # sent, and no reply in time: it may have committed
                    raise CommitLost("COMMIT", None, self._no_answer().orig) from None
                raise
        finally:
            self._stop()

    def _ours(self, error: BaseException | None) -> bool:
        return self._silent is not None and _from(error, self._silent)

    @staticmethod
    def _no_answer() -> NoAnswer:
        return NoAnswer(None, None, TimeoutError("the database did not answer the write "
                                                 "by its deadline"))

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
