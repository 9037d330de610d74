"""Group commit: the orders of concurrent purchases written in one transaction.

An ``atomic`` purchase has taken its units in Redis before it writes its order; what
is left is an UPDATE of ``sales.remaining``, an INSERT and a COMMIT, and under load a
worker has many waiting at once. Here they share one transaction: one UPDATE per sale
by the sum of their units, one multi-row ``INSERT ... RETURNING id``, one COMMIT. The
``sql`` strategy's orders (``ConditionalOrderWriter``) keep one conditional UPDATE each
(the database is their stock) but share the INSERT and the COMMIT.

Each row's id comes back with its ``(sale_id, user_id)``, which is UNIQUE, and is
matched on it: had we asked for the ids in parameter order (``sort_by_parameter_order``)
SQLAlchemy, which cannot rely on SQLite returning a multi-row INSERT's rows in order,
would have sent one INSERT per row (measured: 530 us for 13 rows, 300 us as one).

**How.** ``batching.Batcher``'s leader and followers: the leader writes every order
queued since the last commit, then hands the lead on: one order when the shop is
quiet, a dozen or more under load. **Every request is answered only after its own row
is committed**; nobody hears 201 for a row that a later failure could roll back.

**Failures.** An ``IntegrityError`` (the same buyer or Idempotency-Key twice), or a
row refused by the database (``refused_by_the_database``: a trigger, a read-only
database) rolls the whole batch back, and each order is written alone, so each request
gets the answer a transaction of its own would have given it (201, ``Replay``,
``AlreadyPurchased``, ``SoldOut``, 503): one buyer's refused row is not the others'.
Any other error (database down, locked past the busy timeout) is every order's error:
each request gives its units back (``record_order``'s rule), unless its row is found
committed after all (``orders.landed_after_all``: the COMMIT's reply was lost).

**The INSERT on the driver's cursor** (``rowinsert.py``): Core's executemany handles
every row's parameters and result in Python; rendered once per batch size from the
table's columns and sent on the same connection, a transaction of 30 rows cost 466 us
instead of 627 (docs/performance.md, session 9).

**A Core connection, not a Session.** The statements are Core ones, so the transaction
is the engine's (``engine.begin()``): an ORM ``Session`` around it cost 76 us a
transaction in a micro-benchmark (104 us against 28 us for an empty one), a quarter of
what writing one order alone costs (docs/performance.md, session 8).

**A budget per write** (``writedeadline.py``): a write still queued ``ORDER_WRITE_S``
after it queued is answered 503 unsent (its caller gives its units back), and a batch's
transaction is cancelled at its oldest write's deadline. Behind a held lock a buyer
waited through the batch ahead and each statement's own timeout (a PostgreSQL audit:
30 s, where 10 were promised).

**SQLite under gevent.** The leader's transaction never yields: nothing between BEGIN
and COMMIT talks to Redis or waits (``batching.py`` says why the leader yields first).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from .batching import SERVED, Batcher, Pending, own_copy
from .commits import CommitLost, committing, remote
from .models import Order, PlacedOrder
from .problems import SaleMovedOn, SoldOut, not_enough
from .rowinsert import RowInsert
from .saleinfo import generation as generation_of
from .saleinfo import shown_generation, started_at
from .statements import (
    INSERT_ORDERS,
    SALE_STOCK_AND_GENERATION,
    TAKE_UNITS,
    TAKE_UNITS_IF_LEFT_OF_GENERATION_RETURNING,
    TAKE_UNITS_IF_LEFT_RETURNING,
    TAKE_UNITS_OF_GENERATION,
)
from .writedeadline import ORDER_WRITE_S, bounded, out_of_time

logger = logging.getLogger(__name__)

#: orders per transaction at most (a multi-row INSERT's parameters stay well bounded)
MAX_BATCH = 200

#: the columns of an order row as ``orders.new_order`` makes it (the id is the database's)
ORDER_COLUMNS = ("sale_id", "sku", "user_id", "quantity", "strategy", "fencing_token",
                 "idempotency_key", "created_at")

#: what a purchase queues: its order (gets its id), the row's columns, and the sale
#: generation its units were taken from (None: not checked)
OrderWrite = tuple[PlacedOrder, dict[str, Any], int | None]


class OrderWriter(Batcher[OrderWrite]):
    """One per ``sessionmaker`` (per worker process): see the module docstring."""

    def __init__(self, sessions: sessionmaker[Session], max_batch: int = MAX_BATCH) -> None:
        super().__init__(max_batch)
        #: how long a write may take from when it queued (``writedeadline.py``)
        self.budget_s = ORDER_WRITE_S
        #: the engine the sessions are bound to (its transactions skip the ORM's)
        self._engine: Engine = sessions.kw["bind"]
        #: whether a COMMIT's reply can be lost (``commits.py``)
        self._remote = remote(self._engine.dialect.name)
        #: the rows' INSERT on the driver's cursor (``rowinsert.py``); None: Core's
        self._insert = RowInsert.for_connection(Order.__table__, ORDER_COLUMNS,
                                                ("id", "sale_id", "user_id"),
                                                self._engine.dialect)

    def write(self, order: PlacedOrder, row: dict[str, Any],
              generation: int | None = None) -> PlacedOrder:
        """Insert ``row`` (the columns of ``order``); return ``order`` with its id once
        committed, or raise what its own transaction would have raised (``SaleReset``
        if the sale is no longer in ``generation``)."""
        written: PlacedOrder = self.submit((order, row, generation))
        return written

    def write_now(self, writes: list[OrderWrite],
                  since: Sequence[float] | None = None) -> list[Pending[OrderWrite]]:
        """The same transaction for a batch the caller already has, served by the caller
        at once instead of queued: no greenlet switch (a combined lock section, where
        every switch is a scheduler round the stock lock stays held: ``allocation.py``;
        the script batch that took an ``atomic`` purchase's units: ``takenorders.py``).
        Each ``Pending`` comes back with its order (with its id) or its own error.

        :param since: when each write's wait began (its budget's start); default now."""
        began = [time.monotonic()] * len(writes) if since is None else since
        batch = [Pending(write, done=SERVED, since=start)
                 for write, start in zip(writes, began, strict=True)]
        self._serve(batch)
        return batch

    def _serve(self, batch: list[Pending[OrderWrite]]) -> None:
        now = time.monotonic()
        if any(now - pending.since >= self.budget_s for pending in batch):
            for pending in batch:  # queued past their budget: answered unsent
                if now - pending.since >= self.budget_s:
                    pending.error = out_of_time()
            batch = [pending for pending in batch if pending.error is None]
            if not batch:
                return
        try:
            written = self._transaction(batch)
        except Exception as exc:
            if refused_by_the_database(exc):  # one row's refusal is not the others'
                logger.info("a batch of %d orders was refused (%s); writing them one by one",
                            len(batch), type(exc).__name__)
                for pending in batch:
                    self._alone(pending)
                return
            for pending in batch:
                pending.error = (own_copy(exc) if pending.error is None
                                 else _never_inserted(exc))
            return
        _give_ids(written)

    def _transaction(self, batch: list[Pending[OrderWrite]]
                     ) -> list[tuple[Pending[OrderWrite], int]]:
        """Count the units off ``sales.remaining``, insert the rows, commit; each row
        written with its id (a row refused by ``_take_units`` has its error instead)."""
        deadline = min(pending.since for pending in batch) + self.budget_s
        with committing(self._engine.begin(), self._remote, deadline) as connection:
            bounded(connection, deadline)
            taken = self._take_units(connection, batch)
            if not taken:
                return []
            rows = [pending.item[1] for pending in taken]
            inserted = (self._insert.execute(connection, rows) if self._insert is not None
                        else connection.execute(INSERT_ORDERS, rows))
            ids = {(sale_id, user_id): order_id for order_id, sale_id, user_id in inserted}
            return [(pending, ids[pending.item[1]["sale_id"], pending.item[1]["user_id"]])
                    for pending in taken]

    def _take_units(self, connection: Connection,
                    batch: list[Pending[OrderWrite]]) -> list[Pending[OrderWrite]]:
        """The stock is already taken in Redis: one UPDATE per sale (and generation), by
        the sum. Orders of a generation the sale is no longer in get ``SaleReset``."""
        units: Counter[tuple[int, int | None]] = Counter()
        for pending in batch:
            _, row, generation = pending.item
            units[row["sale_id"], generation] += row["quantity"]
        reset = set()
        for (sale_id, generation), sold in units.items():
            if generation is None:
                connection.execute(TAKE_UNITS, {"b_sale_id": sale_id, "b_units": sold})
            elif connection.execute(TAKE_UNITS_OF_GENERATION, {
                    "b_sale_id": sale_id, "b_units": sold,
                    "b_started_at": started_at(generation)}).rowcount == 0:
                reset.add((sale_id, generation))
        if not reset:
            return batch
        taken = []
        for pending in batch:
            _, row, generation = pending.item
            if (row["sale_id"], generation) in reset:
                pending.error = SaleMovedOn(row["sku"])
            else:
                taken.append(pending)
        return taken

    def _alone(self, pending: Pending[OrderWrite]) -> None:
        pending.error = None  # what the shared transaction decided was rolled back with it
        try:
            _give_ids(self._transaction([pending]))
        except Exception as exc:  # its own answer (orders.py explains an IntegrityError)
            pending.error = exc


class ConditionalOrderWriter(OrderWriter):
    """The ``sql`` strategy's orders: the database is the stock. Each order keeps its own
    ``UPDATE ... WHERE remaining >= quantity``, in the order they queued; one that
    finds too little gets ``SoldOut`` and the others go on, in the same transaction.

    Each UPDATE also returns what is left and the sale's ``started_at``; once the
    transaction commits, ``stock_after[sale_id]`` holds the last of them: what the
    database had at this worker's latest commit, which the ``sql`` path copies into
    Redis (``mirror_stock.lua``) without reading the sale again."""

    def __init__(self, sessions: sessionmaker[Session], max_batch: int = MAX_BATCH) -> None:
        super().__init__(sessions, max_batch)
        #: sale id -> (remaining, started_at) as of this worker's latest commit
        self.stock_after: dict[int, tuple[int, datetime]] = {}
        self._uncommitted: dict[int, tuple[int, datetime]] = {}

    def _transaction(self, batch: list[Pending[OrderWrite]]
                     ) -> list[tuple[Pending[OrderWrite], int]]:
        self._uncommitted = {}
        written = super()._transaction(batch)
        self.stock_after.update(self._uncommitted)  # committed: theirs is the database's
        return written

    @staticmethod
    def _refusal(connection: Connection, row: dict[str, Any]) -> SoldOut:
        """The 409 for units the conditional UPDATE found short: how many are left, as
        every other path says (``problems.not_enough``); "sold out" had a buyer asking
        for 3 of 2 stop, where "only 2 left" lets them ask for 2 (a contract audit)."""
        left = 0  # one unit asked for and refused: none left
        if row["quantity"] > 1:
            found = connection.execute(SALE_STOCK_AND_GENERATION,
                                       {"b_sale_id": row["sale_id"]}).first()
            if found is not None and found[0] < row["quantity"]:  # else: gone meanwhile
                left = found[0]
        return not_enough(row["sku"], left)

    def _take_units(self, connection: Connection,
                    batch: list[Pending[OrderWrite]]) -> list[Pending[OrderWrite]]:
        taken = []
        reset: dict[tuple[int, int | None], bool] = {}  # one look per sale generation, batch
        for pending in batch:
            _, row, read = pending.item
            decrement: dict[str, Any] = {"b_sale_id": row["sale_id"], "b_units": row["quantity"]}
            statement = TAKE_UNITS_IF_LEFT_RETURNING
            if read is not None:  # not from a sale reset since the purchase read it
                statement = TAKE_UNITS_IF_LEFT_OF_GENERATION_RETURNING
                decrement["b_started_at"] = started_at(read)
            left = connection.execute(statement, decrement).first()
            if left is None:
                read_of = (row["sale_id"], read)
                if read is not None and read_of not in reset:
                    reset[read_of] = reset_since(connection, row["sale_id"], read)
                pending.error = (SaleMovedOn(row["sku"]) if reset.get(read_of)
                                 else self._refusal(connection, row))
            else:
                self._uncommitted[row["sale_id"]] = (left[0], left[1])
                taken.append(pending)
        return taken


def _never_inserted(error: BaseException) -> BaseException:
    """The answer of a row its batch refused (no stock left, a sale moved on) when the
    batch's transaction then failed: not its refusal, which may have counted a unit an
    earlier row took and the failure gave back, and not "may have been written" (a
    ``CommitLost``, after a lost COMMIT reply: a review found such a buyer told so and
    kept reserved until the settle): the failure, as one that wrote nothing."""
    if isinstance(error, CommitLost):
        return OperationalError(error.statement, error.params, error.orig)
    return own_copy(error)


def refused_by_the_database(error: BaseException) -> bool:
    """An error the database answered a statement with (a UNIQUE violation, a CHECK, a
    trigger's exception, a read-only transaction), as opposed to one of reaching it
    (``OperationalError``: down, a lost connection, SQLite locked past its timeout)."""
    return isinstance(error, DatabaseError) and not isinstance(error, OperationalError)


def reset_since(connection: Connection, sale_id: int, generation_read: int) -> bool:
    """Whether sale ``sale_id`` is no longer in ``generation_read`` (or is gone)."""
    now = connection.execute(SALE_STOCK_AND_GENERATION, {"b_sale_id": sale_id}).first()
    return now is None or generation_of(now[1]) != generation_read


def _give_ids(written: list[tuple[Pending[OrderWrite], int]]) -> None:
    for pending, order_id in written:
        order, _, generation = pending.item
        order.id = order_id
        if generation is not None:  # written only in it (``_take_units``)
            order.sale_started_at = shown_generation(generation)
        pending.result = order


_WRITERS: weakref.WeakKeyDictionary[sessionmaker[Session], dict[type, OrderWriter]] = \
    weakref.WeakKeyDictionary()
_WRITERS_LOCK = threading.Lock()


def stock_after(sessions: sessionmaker[Session], sale_id: int) -> tuple[int, datetime] | None:
    """``(remaining, started_at)`` of sale ``sale_id`` at this worker's latest ``sql``
    commit (``ConditionalOrderWriter.stock_after``), or None before the first."""
    writer = writer_for(sessions, conditional=True)
    assert isinstance(writer, ConditionalOrderWriter)
    return writer.stock_after.get(sale_id)


def writer_for(sessions: sessionmaker[Session], conditional: bool = False) -> OrderWriter:
    """The writer of ``sessions`` (made on first use, so after a worker's fork); with
    ``conditional`` the ``sql`` strategy's."""
    kind = ConditionalOrderWriter if conditional else OrderWriter
    with _WRITERS_LOCK:
        writers = _WRITERS.setdefault(sessions, {})
        if kind not in writers:
            writers[kind] = kind(sessions)
        return writers[kind]
