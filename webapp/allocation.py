"""One combined section: a batch of buyers served on one hold of the stock lock.

The combiner (``combining.py``) holds the lock and hands a batch here: the queued
buyers of one sale, in arrival order. The section reads the stock once, allocates,
writes the stock once, and returns only when every winner's order row is written.

**Guarantee.** Each buyer gets the answer its own section would have given: units in
FIFO order, each while enough are left, else ``sold_out`` ("only N left" when some
are). Winners' orders carry the holder's fencing token. Nothing taken on an error: if
the read or the SET fails, every buyer of the batch hears that error.

**Algorithm**::

    GET stock + HGET strategy in one round trip (``section.py``; a reset to
    another strategy: everyone 503), allocate in order, simulated work of every
    winner, SET the new stock once, wake the batch; the winners write their rows
    through group commit (one shared transaction, ``groupcommit.py``), a failed row
    gives its units back; when the last row is in, mark the sale sold out if a buyer
    was refused at zero and no units came back

**Failure timeline** the counted writes prevent::

    combiner: SET stock 90 (ten buyers served), wakes them, releases at once
    reset:    takes the lock, deletes the orders, sets stock 100
    buyer 7:  writes its order now: a sale of 100 with 101 units accounted for
    counted:  the combiner releases only after all ten rows are in (or given back)
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .orders import record_order
from .problems import SoldOut
from .section import stock_if_still
from .services import Checkout, PurchaseRequest, SaleInfo


class CountedWrites:
    """Counts a batch's order rows down; the combiner keeps the lock until zero."""

    def __init__(self, rows: int) -> None:
        self.rows = self._left = rows
        self._mutex = threading.Lock()
        self.done = threading.Event()

    def one_done(self) -> None:
        with self._mutex:
            self._left -= 1
            if self._left == 0:
                self.done.set()


@dataclass(eq=False)
class Buyer:
    """One queued purchase and, once its batch is served, its answer."""

    sale: SaleInfo
    request: PurchaseRequest
    woken: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to combine, not with an answer
    fencing_token: int | None = None
    writes: CountedWrites | None = None  # units allocated: write the row, then count down
    order: Any = None
    error: BaseException | None = None


def take_batch(queue: deque[Buyer], max_batch: int) -> list[Buyer]:
    """Pop a batch off the head of ``queue``: its buyers of one sale, at most ``max_batch``."""
    batch: list[Buyer] = []
    head = queue[0].sale if queue else None
    while queue and len(batch) < max_batch and queue[0].sale == head:
        batch.append(queue.popleft())
    return batch


def serve_batch(batch: list[Buyer], me: Buyer, deps: Checkout, lock: Any) -> None:
    """One section for the whole batch; returns once every winner's row is written.

    ``me`` is the combiner's own buyer: it is not woken, and hears an error as raised.
    """
    sale = batch[0].sale
    winners: list[Buyer] = []
    refused_at_zero = False
    try:
        left = stock_if_still(deps, sale)
        for buyer in batch:
            quantity = buyer.request.quantity
            if left >= quantity:
                winners.append(buyer)
                left -= quantity
            else:
                refused_at_zero |= left <= 0
                buyer.error = SoldOut(f"{sale.sku} is sold out" if left <= 0
                                      else f"only {left} left of {sale.sku}")
        if winners:
            if sale.work_ms > 0:  # the simulated business work of every winner
                deps.sleep(sale.work_ms * len(winners) / 1000)
            deps.redis.set(sale.keys.stock, left)
    except BaseException as exc:  # nothing was taken: every buyer hears the error
        for buyer in batch:
            buyer.error = exc if buyer is me else _own_copy(exc)
        winners, refused_at_zero = [], False
        if not isinstance(exc, Exception):
            raise
    finally:
        writes = CountedWrites(len(winners))
        for buyer in winners:
            buyer.fencing_token, buyer.writes = lock.fencing_token, writes
        for buyer in batch:
            if buyer is not me:
                buyer.woken.set()
    if winners:
        write_order(me, deps)  # the combiner's own row, if it won, joins the others
        writes.done.wait()
        # a failed row gave its units back: then the sale is not sold out after all
        left += sum(b.request.quantity for b in winners if b.order is None)
    if refused_at_zero and left <= 0:
        deps.redis.set(sale.keys.soldout, 1)


def write_order(buyer: Buyer, deps: Checkout) -> None:
    """Write ``buyer``'s order row if it won units and has not written it yet."""
    writes, buyer.writes = buyer.writes, None
    if writes is None:
        return
    try:  # a lone winner writes as the plain path does: no group to wait for
        buyer.order = record_order(deps.sessions, deps.redis, buyer.sale,
                                   buyer.request.user_id, buyer.request.quantity,
                                   buyer.fencing_token, buyer.request.idempotency_key,
                                   grouped=writes.rows > 1)
    except BaseException as exc:  # its units are back (record_order): its own answer
        buyer.error = exc
    finally:
        writes.one_done()


def _own_copy(exc: BaseException) -> BaseException:
    """One exception object per buyer: raised in many greenlets it would collect all
    their tracebacks."""
    try:
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied is shared
        return exc
