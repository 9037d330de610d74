"""An ``atomic`` purchase's order row, written by the script batch that took its units.

An ``atomic`` purchase has two shared steps: its script (``atomic_checkout.lua``, sent
with the concurrent ones in one round trip: ``pipelining.py``) takes the units, then its
order row is written (with the concurrent ones in one transaction: ``groupcommit.py``).
Done apart, each step is a wait in its own batch, and under gevent a wait costs the
worker a scheduler round: with hundreds of requests in flight about 60 us of CPU
(docs/performance.md, session 6), near what a purchase may cost beyond a no-op at all.

Here the leader of the script batch, once the replies are in, writes the rows of every
purchase whose units the batch took, in one transaction (``OrderWriter.write_now``),
before it wakes them: a purchase waits once.

**What does not change.** A row is written only in the sale generation its units came
from; each purchase gets its own answer, its order or the error its own transaction
would have raised, and on an error its caller gives its units back (``record_order``);
nobody is answered before its row is committed; a row has ``ORDER_WRITE_S`` from when
its purchase queued its script (``writedeadline.py``). The transaction does not yield (SQLite
under gevent: ``orders.py``), and the batch's callers are all waiting while it runs.

**When it does not apply** (the caller writes its row itself, as before): the script
took nothing (a refusal, another strategy), the sale has simulated work (``work_ms``:
the row comes after it), the purchase has an Idempotency-Key (it looks for its earlier
order first, and takes the units in steps), the script was reloaded (NOSCRIPT), or
building the row failed. A row is never written twice: ``written`` is set only by the
transaction that wrote it, and the caller writes only when it is unset.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from .batching import Pending
from .groupcommit import OrderWrite, writer_for
from .models import utcnow
from .orders import new_order
from .saleinfo import SaleInfo, parsed_sale_reply

logger = logging.getLogger(__name__)


class TakenOrder:
    """One purchase's ``then`` for ``ScriptPipeline.run``: what its row needs, and once
    the leader has written it, the sale it was written for and ``written`` (the row's
    ``Pending``: its order with its id, or its own error)."""

    __slots__ = ("sessions", "sku", "user_id", "quantity", "known", "sale", "written",
                 "since")

    def __init__(self, sessions: sessionmaker[Session], sku: str, user_id: str,
                 quantity: int, known: SaleInfo | None = None) -> None:
        self.sessions = sessions
        self.sku = sku
        self.user_id = user_id
        self.quantity = quantity
        #: the sale whose generation went with the script: its reply then has no row
        self.known = known
        self.sale: SaleInfo | None = None
        self.written: Pending[OrderWrite] | None = None
        #: when the purchase queued its script: its row's budget starts there, the wait
        #: behind the batch ahead (whose leader writes rows too) counted in
        self.since = time.monotonic()

    def row(self, reply: Any, taken_at: datetime) -> OrderWrite | None:
        """The row to write after ``atomic_checkout.lua``'s ``reply``, or None: the
        script took nothing, or the row must wait for the sale's simulated work.
        ``taken_at`` is its ``created_at``: when the batch's replies came in."""
        code, _, *rest = reply
        if code != 1:
            return None
        sale = parsed_sale_reply(self.sku, rest[0]) if rest else self.known
        if sale is None:
            return None
        if sale.strategy != "atomic" or sale.work_ms > 0:
            return None
        order, row = new_order(sale, self.user_id, self.quantity, None, None, taken_at)
        self.sale = sale
        return order, row, sale.generation


def write_taken(follow: list[tuple[Any, Any]]) -> None:
    """``ScriptPipeline``'s ``after``: the rows of the batch's purchases whose units were
    taken, in one transaction per database. A ``then`` whose row could not be built is
    left unwritten: its caller writes it.

    The rows share one ``created_at``, the moment the replies came in (their units were
    all taken in that round trip): one clock read and one conversion to SQLite's text a
    batch instead of one a row, ~3 us of each purchase (docs/performance.md, session 13)."""
    taken_at = utcnow()
    batches: dict[sessionmaker[Session], tuple[list[TakenOrder], list[OrderWrite]]] = {}
    for then, reply in follow:
        if not isinstance(then, TakenOrder):
            continue
        try:
            write = then.row(reply, taken_at)
        except Exception:  # a malformed hash copy: the caller's own lookup answers it
            logger.exception("could not build the order of %r for %s", then.user_id,
                             then.sku)
            continue
        if write is not None:
            owners, writes = batches.setdefault(then.sessions, ([], []))
            owners.append(then)
            writes.append(write)
    for sessions, (owners, writes) in batches.items():
        written = writer_for(sessions).write_now(writes, [owner.since for owner in owners])
        for owner, pending in zip(owners, written, strict=True):
            owner.written = pending
