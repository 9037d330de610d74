"""Flat combining: the holder of the stock lock serves every buyer queued in its worker.

Hendler, Incze, Shavit and Tzafrir, "Flat Combining and the Synchronization-Parallelism
Tradeoff" (SPAA 2010): threads publish their requests on a list; whoever gets the lock
becomes the *combiner* and applies all published requests in one pass, so the lock
and the data are touched once per batch instead of once per request.

Cohorting (``cohort.py``) already passes a held lock between the buyers of one worker,
but each buyer still runs its own section, and in a saturated gevent worker every
round trip of a section waits behind every runnable greenlet (3.3 ms a section,
measured): one section per purchase caps a lock near 300 purchases/s. Here one
section serves up to ``max_batch`` buyers.

**Guarantee.** The distributed lock's: the stock changes only while this process holds
it, and the holder makes every queued buyer's change on that buyer's behalf. Each
buyer gets the answer its own section would have given: units in FIFO order, each
while enough are left, else ``sold_out`` or "only N left". Their orders carry the
holder's fencing token and are written before the lock is released or kept.

**Algorithm** (one ``Combiner`` per lock resource per worker)::

    buyer:    queue itself; if no one combines, combine; else wait for an answer,
              or leave with 503 busy if not taken into a batch in time
    combiner: acquire the lock (its own deadline); then, per batch (the queued buyers
              of one sale, FIFO, at most max_batch):
              GET stock + HGET strategy in one round trip (a reset to another
              strategy: everyone 503), allocate, SET the new stock once, wake the
              batch; the winners write their rows through group commit (one shared
              transaction, ``groupcommit.py``) and a failed row gives its units back;
              when every row is written, serve the next batch while the cohort's
              bound allows (``Cohort.keep``), else release and let the oldest queued
              buyer combine

**Failure timeline** the counted writes prevent::

    combiner: SET stock 90 (ten buyers served), wakes them, releases at once
    reset:    takes the lock, deletes the orders, sets stock 100
    buyer 7:  writes its order now: a sale of 100 with 101 units accounted for
    counted:  the combiner releases only after all ten rows are in (or given back)

**When to use it.** Many buyers of one hot item per worker and a section made of round
trips: the batch pays them once. Not for the unsafe seeds (they must oversell) nor
``multi`` (its lock also covers the buyer, so it cannot serve another).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from lockcore import LockNotOwned

from .orders import record_order
from .problems import Busy, SoldOut
from .services import Checkout, PurchaseRequest, SaleInfo

logger = logging.getLogger(__name__)


def stock_if_still(deps: Checkout, sale: SaleInfo) -> int:
    """The stock, read in one round trip with the sale's current strategy. A buyer who
    looked the sale up before a reset switched its strategy holds the *old* strategy's
    lock, which no longer excludes anyone: it must not touch the stock."""
    pipe = deps.redis.pipeline(transaction=False)
    pipe.get(sale.keys.stock)
    pipe.hget(sale.keys.info, "strategy")
    stock, strategy = pipe.execute()
    if strategy is not None and strategy.decode() != sale.strategy:
        raise Busy(f"the sale of {sale.sku} was reset to another strategy; try again",
                   retry_after_s=1)
    return int(stock or 0)


class _Writes:
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
class _Buyer:
    sale: SaleInfo
    request: PurchaseRequest
    woken: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to combine, not with an answer
    fencing_token: int | None = None
    writes: _Writes | None = None  # units allocated: write the row, then count down
    order: Any = None
    error: BaseException | None = None


class CombinableLock:
    """The lock handle ``locks.lock_for`` gives with ``LOCK_COMBINE``: the lock's own
    interface (a reset acquires it like any lock) plus the worker's combiner for it."""

    def __init__(self, lock: Any, combiner: Combiner) -> None:
        self.lock, self.combiner = lock, combiner

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self.lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self.lock.release()

    def __getattr__(self, name: str) -> Any:  # fencing_token, name, lost, ...
        return getattr(self.lock, name)


class Combiner:
    """The publication queue in front of one lock resource, in one process."""

    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch
        self._mutex = threading.Lock()
        self._queue: deque[_Buyer] = deque()
        self._busy = False  # someone combines (or is acquiring the lock to)
        #: batches served and buyers in them (for tests and the curious)
        self.batches = self.served = 0

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                 handle: CombinableLock) -> Any:
        """Queue ``request``; combine if no one does; return its order or raise its answer."""
        me = _Buyer(sale, request)
        deadline = deps.monotonic() + deps.lock_timeout_s
        with self._mutex:
            self._queue.append(me)
            me.lead, self._busy = not self._busy, True
        if not me.lead and not me.woken.wait(max(0.0, deadline - deps.monotonic())):
            with self._mutex:
                if not me.lead and me in self._queue:  # not taken into a batch: give up
                    self._queue.remove(me)
                    raise Busy(f"the stock lock for {sale.sku} was not free within "
                               f"{deps.lock_timeout_s:g}s", retry_after_s=1)
            me.woken.wait()  # served or handed the lead while timing out: take it
        if me.lead:
            self._combine(me, deps, handle.lock, deadline)
        self._write(me, deps)
        if me.error is not None:
            raise me.error
        return me.order

    def _combine(self, me: _Buyer, deps: Checkout, lock: Any, deadline: float) -> None:
        try:
            got = lock.acquire(blocking=True, timeout=max(0.0, deadline - deps.monotonic()))
        except BaseException:
            self._leave(me)
            raise
        if not got:
            self._leave(me)
            raise Busy(f"the stock lock for {me.sale.sku} was not free within "
                       f"{deps.lock_timeout_s:g}s", retry_after_s=1)
        try:
            while batch := self._take_batch():  # empty: the queued ones timed out
                self._serve(batch, me, deps, lock)
                with self._mutex:
                    more = bool(self._queue)
                # the cohort's bound (passes, hold time, a lost lock) ends a hold
                if not more or not getattr(lock, "keep", _never)():
                    break
        finally:
            try:
                lock.release()
            except LockNotOwned:  # the TTL ran out inside the section: the seed 004 lesson
                logger.warning("%s lock on %s expired before release", me.sale.strategy,
                               me.sale.sku)
            except Exception:
                logger.exception("releasing the %s lock on %s failed", me.sale.strategy,
                                 me.sale.sku)
            with self._mutex:
                self._pass_lead()

    def _take_batch(self) -> list[_Buyer]:
        with self._mutex:
            batch: list[_Buyer] = []
            head = self._queue[0].sale if self._queue else None
            while self._queue and len(batch) < self.max_batch and self._queue[0].sale == head:
                batch.append(self._queue.popleft())
            return batch

    def _serve(self, batch: list[_Buyer], me: _Buyer, deps: Checkout, lock: Any) -> None:
        """One section for the whole batch; returns once every winner's row is written."""
        sale = batch[0].sale
        winners: list[_Buyer] = []
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
            writes = _Writes(len(winners))
            for buyer in winners:
                buyer.fencing_token, buyer.writes = lock.fencing_token, writes
            for buyer in batch:
                if buyer is not me:
                    buyer.woken.set()
            self.batches, self.served = self.batches + 1, self.served + len(batch)
        if winners:
            self._write(me, deps)  # the combiner's own row, if it won, joins the others
            writes.done.wait()
            # a failed row gave its units back: then the sale is not sold out after all
            left += sum(b.request.quantity for b in winners if b.order is None)
        if refused_at_zero and left <= 0:
            deps.redis.set(sale.keys.soldout, 1)

    def _write(self, buyer: _Buyer, deps: Checkout) -> None:
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

    def _leave(self, me: _Buyer) -> None:
        with self._mutex:
            if me in self._queue:
                self._queue.remove(me)
            self._pass_lead()

    def _pass_lead(self) -> None:
        """To the oldest buyer still queued (it acquires the lock itself), or to nobody."""
        if self._queue:
            self._queue[0].lead = True
            self._queue[0].woken.set()
        else:
            self._busy = False


def _never() -> bool:
    return False


def _own_copy(exc: BaseException) -> BaseException:
    """One exception object per buyer: raised in many greenlets it would collect all
    their tracebacks."""
    try:
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied is shared
        return exc
