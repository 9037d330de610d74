"""An order write's deadline: one budget for the whole wait, not one per statement.

**What failed** (a PostgreSQL audit: ``LOCK TABLE orders`` held 30-50 s, two workers):
``statement_timeout`` (10 s) bounds one statement, and a buyer waits through several::

    worker 1:  batch A: UPDATE sales (row lock), INSERT orders: waits on the table lock
    worker 2:  batch B: UPDATE sales: waits on A's row lock ...... 10 s (A cancelled)
    worker 2:  batch B: INSERT orders: waits on the table lock ... 10 s (cancelled)
    worker 2:  a buyer queued behind B, in B's successor's batch . 10 s more: 30 s

and one heard 201 after 29.8 s, where the page and the docs promised 10 s for the write.

**The fix.** A write has ``ORDER_WRITE_S`` from the moment it queued (for an ``atomic``
purchase whose row its script batch writes: from when its script queued). A batch
leaves out the writes already past it (503, units back: ``groupcommit.py``), and its
transaction gets what its oldest write has left: before each statement, if that is
less than the statement timeout in force, ``SET LOCAL statement_timeout`` lowers it,
so PostgreSQL cancels the statement at the deadline, as it cancelled one at 10 s. A
cancelled write fails as before: 503 and its units back.

The SET costs a round trip, so it is sent only when the time left is ``SLACK_S`` under
the timeout in force: a write that queued for milliseconds sends none. A statement may
so run ``SLACK_S`` past the deadline, never more (the next one gets 1 ms).
A server that says nothing cancels nothing: a gevent worker gives the write up itself
``NO_ANSWER_S`` after that (``commits.py``), and looks for the row of a COMMIT it gave
up within ``LANDED_CHECK_S``.
SQLite has no server to cancel a statement: its writes are bounded by the busy timeout
(5 s) and the queue's deadline.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Engine, event

from .problems import Busy

#: a buyer's order write, from when it queued to its answer (PostgreSQL), at most this
#: (plus ``SLACK_S`` and the COMMIT)
ORDER_WRITE_S = 10.0
#: how far under the timeout in force the time left must be to send a SET for it
SLACK_S = 0.25
#: how long after that (the deadline + ``SLACK_S``) a gevent worker waits for a database
#: that has not answered at all before it gives the write up itself (``commits.py``):
#: a server that says nothing enforces no timeout of its own
NO_ANSWER_S = 0.25
#: how long the look for the row of a write given up during its COMMIT may take (the
#: wait for that write's lock on the sale row included: ``orders._written_rows``); past
#: it, the write is in doubt and settled later
LANDED_CHECK_S = 0.5
#: the execution option of a Core connection that carries its transaction's deadline
OPTION = "write_deadline"


#: where a pooled connection keeps the statement timeout it started with (ms; None: none)
SESSION_MS = "statement_timeout_ms"


class WriteDeadline:
    """One transaction's deadline (``time.monotonic()``) and the statement timeout it
    has set (None: the session's)."""

    __slots__ = ("at", "set_ms")

    def __init__(self, at: float) -> None:
        self.at = at
        self.set_ms: int | None = None

    def before(self, cursor: Any, session_ms: int | None) -> None:
        """Lower the statement timeout to the time left, if it is well under the one in
        force (``session_ms``: the session's; None: none, so always). Never raised: a
        SET is only ever below the timeout in force."""
        in_force = self.set_ms if self.set_ms is not None else session_ms
        left_ms = int((self.at - time.monotonic()) * 1000)
        if in_force is not None and left_ms > in_force - SLACK_S * 1000:
            return
        self.set_ms = max(left_ms, 1)  # 0 would mean no timeout at all
        cursor.execute(f"SET LOCAL statement_timeout = {self.set_ms}")


def bounded(connection: Connection, at: float) -> Connection:
    """``connection`` (a transaction's) with its statements bounded by deadline ``at``
    on an engine that ``keeps_deadlines``; elsewhere, unchanged in effect."""
    return connection.execution_options(**{OPTION: WriteDeadline(at)})


def keep_deadlines(engine: Engine, session_ms: int | None = None) -> None:
    """Make ``engine`` (PostgreSQL) honour ``bounded``. ``session_ms``: the statement
    timeout its connections start with, if the shop set it; else (a ``DATABASE_URL``
    with ``options=`` of its own) each connection asks the server once, when it opens.

    It was taken as unknown, so every write sent a SET with the time left (10 s), above
    a URL's own ``statement_timeout=2000``: its 2 s became 10 s (a review)."""
    if session_ms is None:

        @event.listens_for(engine, "connect")
        def _session_timeout(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SHOW statement_timeout")
                record.info[SESSION_MS] = timeout_ms(cursor.fetchone()[0])
            finally:
                cursor.close()
                dbapi_connection.rollback()  # the SHOW began a transaction

    @event.listens_for(engine, "before_cursor_execute")
    def _deadline(connection: Connection, cursor: Any, statement: str, parameters: Any,
                  context: Any, executemany: bool) -> None:
        deadline = connection.get_execution_options().get(OPTION)
        if deadline is not None:
            in_force = session_ms if session_ms is not None else connection.info.get(SESSION_MS)
            deadline.before(cursor, in_force)


_UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def timeout_ms(shown: str) -> int | None:
    """PostgreSQL's ``SHOW statement_timeout`` in ms ("2s", "1500ms", "1min"); None for
    "0", no timeout."""
    number = shown.rstrip("abcdefghijklmnopqrstuvwxyz")
    ms = int(float(number) * _UNITS_MS.get(shown[len(number):], 1))
    return ms or None


def out_of_time() -> Busy:
    """The 503 of a write still queued at its deadline: it was never sent."""
    return Busy("the order could not be written in time (the database is slow); nothing "
                "was bought, try again")
