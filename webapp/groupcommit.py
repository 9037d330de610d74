"""Group commit: the orders of concurrent purchases written in one transaction.

An ``atomic`` purchase has taken its units in Redis before it writes its order; what
is left is an UPDATE of ``sales.remaining``, an INSERT and a COMMIT. Under load a worker
has many such writes waiting at once, and each paid its own transaction. Here they
share one: one UPDATE per sale by the sum of their units, one multi-row
``INSERT ... RETURNING id``, one COMMIT.

**How.** ``batching.Batcher``'s leader and followers: a purchase queues its order; if
no one of its worker is writing, it leads and writes every order queued since the last
commit in one transaction, then hands the lead on. So a batch is what piled up since
the last commit: one order when the shop is quiet, a dozen or more under load. **Every
request is answered only after its own row is committed**; a purchase never hears 201
for a row that a later failure could still roll back.

**Failures.** An ``IntegrityError`` (a UNIQUE violation: the same buyer or
Idempotency-Key twice) rolls the whole batch back; then each order is written alone
(``insert_order``), so each request gets the answer a transaction of its own would have
given it (201, ``Replay``, ``AlreadyPurchased``...). Any other error (database down,
locked past the busy timeout) is every order's error: each request gives its units back
(``record_order``'s rule) and answers as before.

**SQLite under gevent.** The leader's transaction never yields: the queue's lock is
taken before BEGIN and after COMMIT, and nothing in between talks to Redis or waits.
That is also why the leader yields once before it takes its batch (``batching.py``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from .batching import Batcher, Pending, own_copy
from .models import Order, Sale

logger = logging.getLogger(__name__)

#: orders per transaction at most (a multi-row INSERT's parameters stay well bounded)
MAX_BATCH = 200

#: what a purchase queues: its Order (gets its id) and the row's columns
_Write = tuple[Order, dict[str, Any]]


class OrderWriter(Batcher[_Write]):
    """One per ``sessionmaker`` (per worker process): see the module docstring."""

    def __init__(self, sessions: sessionmaker[Session], max_batch: int = MAX_BATCH) -> None:
        super().__init__(max_batch)
        self._sessions = sessions

    @property
    def commits(self) -> int:
        return self.batches

    @property
    def orders(self) -> int:
        return self.items

    def write(self, order: Order, row: dict[str, Any]) -> Order:
        """Insert ``row`` (the columns of ``order``); return ``order`` with its id once
        committed, or raise what its own transaction would have raised."""
        written: Order = self.submit((order, row))
        return written

    def _serve(self, batch: list[Pending[_Write]]) -> None:
        try:
            ids = self._insert(batch)
        except IntegrityError:
            logger.info("a batch of %d orders hit a UNIQUE constraint; writing them one by one",
                        len(batch))
            for pending in batch:
                self._alone(pending)
            return
        except Exception as exc:
            for pending in batch:
                pending.error = own_copy(exc)
            return
        for pending, order_id in zip(batch, ids, strict=True):
            pending.item[0].id = order_id
            pending.result = pending.item[0]

    def _insert(self, batch: list[Pending[_Write]]) -> list[int]:
        units: Counter[int] = Counter()
        for pending in batch:
            units[pending.item[1]["sale_id"]] += pending.item[1]["quantity"]
        with self._sessions.begin() as session:
            connection = session.connection()
            for sale_id, sold in units.items():
                connection.execute(update(Sale).where(Sale.id == sale_id)
                                   .values(remaining=Sale.remaining - sold))
            inserted = connection.execute(
                insert(Order).returning(Order.id, sort_by_parameter_order=True),
                [pending.item[1] for pending in batch])
            return [row[0] for row in inserted]

    def _alone(self, pending: Pending[_Write]) -> None:
        try:
            pending.item[0].id = self._insert([pending])[0]
            pending.result = pending.item[0]
        except Exception as exc:  # its own answer (orders.py explains an IntegrityError)
            pending.error = exc


_WRITERS: weakref.WeakKeyDictionary[sessionmaker[Session], OrderWriter] = \
    weakref.WeakKeyDictionary()
_WRITERS_LOCK = threading.Lock()


def writer_for(sessions: sessionmaker[Session]) -> OrderWriter:
    """The ``OrderWriter`` of ``sessions`` (made on first use, so after a worker's fork)."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(sessions)
        if writer is None:
            writer = _WRITERS[sessions] = OrderWriter(sessions)
        return writer
