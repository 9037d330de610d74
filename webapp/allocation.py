"""One combined section: a batch of buyers served on one hold of the stock lock.

The combiner (``combining.py``) holds the lock and hands a batch here: the queued
buyers of one sale, in arrival order. The section reads the stock once, allocates,
writes the stock once and writes every winner's order row; the combiner releases the
lock, and only then wakes the batch with its answers (``wake``).

**Guarantee.** Each buyer gets the answer its own section would have given: units in
FIFO order, each while enough are left, else ``sold_out`` ("only N left" when some
are). Winners' orders carry the holder's fencing token. Nothing taken on an error: if
the read or the SET fails, every buyer of the batch hears that error. Every row is
written (or its units are back) before the lock is released or kept.

**Algorithm**::

    GET stock + HGET strategy in one round trip (``section.py``; a reset to
    another strategy: everyone 503), allocate in order, simulated work of every
    winner, SET the new stock once; the combiner writes the winners' rows in one
    transaction itself, without yielding (``sectionorders.py``), a failed row's
    units back in one INCRBY; mark the sale sold out if a buyer was refused at zero
    and no units came back; then (``combining.py``) release, and wake the batch

**Why the combiner writes the rows, and wakes the batch only after the release.** In a
saturated gevent worker a round trip's reply waits behind every runnable greenlet, and
the lock is held through it. Waking the winners to write their own rows (the first
design) cost three scheduler rounds a section: the winners run, group commit's leader
yields, the combiner is woken when the last row is in. Waking ~60 answered buyers
before the release made the release wait behind their responses (~16 ms of a 24 ms
hold, measured). The other worker idles meanwhile, its buyers all queued on the lock
(docs/performance.md, session 5).

**Failure timeline** writing before the wake-up prevents::

    combiner: SET stock 90 (ten buyers served), wakes them, releases at once
    reset:    takes the lock, deletes the orders, sets stock 100
    buyer 7:  writes its order now: a sale of 100 with 101 units accounted for
    written:  the combiner writes the rows before it releases; buyers only hear them
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .batching import own_copy
from .deadlines import set_stock
from .orders import Relock
from .problems import Busy, not_enough
from .section import flag_sold_out, lease_renewed, still_held, stock_if_still
from .sectionorders import give_back_failed, write_batch
from .services import Checkout, PurchaseRequest, SaleInfo


@dataclass(eq=False)
class Buyer:
    """One queued purchase and, once its batch is served, its answer."""

    sale: SaleInfo
    request: PurchaseRequest
    woken: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to combine, not with an answer
    order: Any = None
    error: BaseException | None = None


def take_batch(queue: deque[Buyer], max_batch: int, ttl_ms: int | None = None) -> list[Buyer]:
    """Pop a batch off the head of ``queue``: its buyers of one sale, at most ``max_batch``,
    and no more than the lock's ``ttl_ms`` has room for (``work_cap``)."""
    batch: list[Buyer] = []
    head = queue[0].sale if queue else None
    if head is not None:
        max_batch = work_cap(max_batch, head.work_ms, ttl_ms)
    while queue and len(batch) < max_batch and queue[0].sale == head:
        batch.append(queue.popleft())
    return batch


def work_cap(max_batch: int, work_ms: int, ttl_ms: int | None) -> int:
    """How many buyers one batch may take when each winner does ``work_ms`` of simulated
    work in the section: as many as fit in a quarter of the lock's TTL, at least one.

    A batch's work is the sum of its winners', and nothing renews the lock while it
    runs. The lock lives ``LOCK_TTL_MS + 2 * work_ms`` (``locks._new_lock``): room for one
    buyer's work, not for 256 of them. Uncapped, 20 buyers of a ``work_ms=1000`` sale
    slept 20 s under a 12 s lock; another worker took the expired lock and both sold
    (13 units oversold, two fencing tokens among the orders; found by a contract audit).
    A quarter leaves the cohort's bound (a new batch only while the hold is younger
    than a quarter of the TTL, ``holdbound.py``) the other half as margin.
    """
    if work_ms <= 0 or not ttl_ms:
        return max_batch
    return max(1, min(max_batch, ttl_ms // (4 * work_ms)))


def serve_batch(batch: list[Buyer], me: Buyer, deps: Checkout, lock: Any) -> None:
    """One section for the whole batch; returns once every buyer has its answer and
    every winner's row is written. The caller wakes them (``wake``) after the release.

    ``me`` is the combiner's own buyer: it is not woken, and hears an error as raised.
    """
    sale = batch[0].sale
    winners: list[Buyer] = []
    refused_at_zero = False
    try:
        left, generation = stock_if_still(deps, sale, lock.fencing_token)
        for buyer in batch:
            quantity = buyer.request.quantity
            if left >= quantity:
                winners.append(buyer)
                left -= quantity
            else:
                refused_at_zero |= left <= 0
                buyer.error = not_enough(sale.sku, left)
        if winners:
            if sale.work_ms > 0:  # the simulated business work of every winner
                deps.sleep(sale.work_ms * len(winners) / 1000)
            still_held(lock, sale)  # told it was lost meanwhile: sell nothing
            set_stock(deps.redis, sale.keys.stock, left, generation=generation,
                      generation_key=sale.keys.stock_gen)
    except BaseException as exc:  # nothing was taken: every buyer hears the error
        for buyer in batch:
            buyer.error = exc if buyer is me else own_copy(exc)
        if not isinstance(exc, Exception):
            raise
        return
    if winners:
        # a failed row gave its units back, or will under the lock: then the sale is
        # not sold out after all (one in doubt has not: its units come back later if its
        # row is not written, and lift the flag then)
        left += write_rows(winners, deps, lock.fencing_token, generation,
                           lease=functools.partial(lease_renewed, lock))
    if refused_at_zero and left <= 0:
        flag_sold_out(deps.redis, sale, generation)


def write_rows(winners: list[Buyer], deps: Checkout, fencing_token: int | None,
               generation: int | None, lease: Callable[[], bool] | None = None) -> int:
    """Every winner's order row, in one transaction written now (``sectionorders.py``),
    only in the sale ``generation`` the section's stock belongs to: each winner ends with
    its ``order`` or its ``error``, whatever happens. The answers are set before the
    failed rows' units go back, the only step that can yield (and so be where a killed
    combiner stops): a buyer with a row never hears an error. Returns the units given
    back (now, or later under the lock if ``lease`` says the section's lock ran out:
    ``orders.Relock``)."""
    sale = winners[0].sale
    wanted = [(b.request.user_id, b.request.quantity, fencing_token,
               b.request.idempotency_key) for b in winners]
    relock = Relock(functools.partial(deps.lock_for, sale, "settle"))
    try:
        outcomes = write_batch(deps.sessions, sale, wanted, deps.redis, generation,
                               relock=relock)
        for buyer, outcome in zip(winners, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                buyer.error = outcome
            else:
                buyer.order = outcome
    finally:  # nobody may hear a 201 without a row
        for buyer in winners:
            if buyer.order is None and buyer.error is None:
                buyer.error = Busy(f"the order for {sale.sku} could not be written; "
                                   "try again")
    return give_back_failed(deps.redis, sale, wanted, outcomes, generation,
                            lease=lease, relock=relock, sessions=deps.sessions)


def wake(batch: list[Buyer], me: Buyer) -> None:
    """Hand the served buyers their answers (all but ``me``, the combiner)."""
    for buyer in batch:
        if buyer is not me:
            buyer.woken.set()
