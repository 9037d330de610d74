"""Flat combining: the holder of the stock lock serves every buyer queued in its worker.

Hendler, Incze, Shavit and Tzafrir, "Flat Combining and the Synchronization-Parallelism
Tradeoff" (SPAA 2010): threads publish their requests on a list; whoever gets the lock
becomes the *combiner* and applies all published requests in one pass, so the lock
and the data are touched once per batch instead of once per request.

Cohorting (``cohort.py``) already passes a held lock between the buyers of a worker, but
each buyer still runs its own section, and in a saturated gevent worker every round trip
waits behind every runnable greenlet (3.3 ms a section, measured): one section per
purchase caps a lock near 300 purchases/s. Here one section serves ``max_batch`` buyers.

**Guarantee.** The distributed lock's: the stock changes only while this process holds
it, and the holder makes each queued buyer's change on its behalf, with the answer its
own section would have given (``allocation.py``) and its order row written before the
lock is released or kept.

**Algorithm** (one ``Combiner`` per lock resource and TTL per worker: ``locks.local_queue``)::

    buyer:    queue; if no one combines, combine; else wait for an answer, or leave
              with 503 busy if not taken into a batch in time
    combiner: acquire the lock (its own deadline); serve a batch in one section
              (``allocation.py``; with simulated work, only as many buyers as a
              quarter of the lock's TTL has room for); serve the next while the
              cohort's bound allows (``Cohort.keep``), else release, let the oldest
              queued buyer combine, and only then wake the served buyers with their
              answers

**Failure timeline** the check under the mutex prevents::

    combiner: hands the lead to buyer 8 just as buyer 8's wait runs out
    buyer 8:  leaves with 503; buyers 9.. wait for a combiner that never comes
    checked:  a buyer leaves only if still queued and not the lead, else takes what it got

**When to use it.** Many buyers of one hot item per worker and a section made of round
trips: the batch pays them once. Not for the unsafe seeds (they must oversell) nor
``multi`` (its lock also covers the buyer, so it cannot serve another).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from .allocation import Buyer, serve_batch, take_batch, wake
from .section import lock_timed_out, release_after_section
from .services import Checkout, PurchaseRequest, SaleInfo

#: the attribute of a shop's lock that bounds one section's simulated work
#: (``locks._new_lock``): its TTL, or for a lock without one the TTL it would have
SECTION_MS = "section_ms"


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
        self._queue: deque[Buyer] = deque()
        self._busy = False  # someone combines (or is acquiring the lock to)
        self.batches = self.served = 0  # batches served, buyers in them (tests, the curious)

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                 handle: CombinableLock) -> Any:
        """Queue ``request``; combine if no one does; return its order or raise its answer."""
        me = Buyer(sale, request)
        deadline = deps.monotonic() + deps.lock_timeout_s
        with self._mutex:
            self._queue.append(me)
            me.lead, self._busy = not self._busy, True
        if not me.lead and not me.woken.wait(max(0.0, deadline - deps.monotonic())):
            with self._mutex:
                gave_up = not me.lead and me in self._queue  # not taken into a batch
                if gave_up:
                    self._queue.remove(me)
            if gave_up:  # answered outside the mutex: the answer may ask Redis (a review)
                raise lock_timed_out(deps, sale, handle)
            me.woken.wait()  # served or handed the lead while timing out: take it
        if me.lead:
            self._combine(me, deps, handle.lock, deadline)
        if me.error is not None:
            raise me.error
        return me.order

    def _combine(self, me: Buyer, deps: Checkout, lock: Any, deadline: float) -> None:
        sale = me.sale
        try:
            got = lock.acquire(blocking=True, timeout=max(0.0, deadline - deps.monotonic()))
        except BaseException:
            self._leave(me)
            raise
        if not got:
            self._leave(me)
            raise lock_timed_out(deps, sale, lock)
        served: list[Buyer] = []
        try:
            # caps a batch with simulated work: the lock's TTL, or for a lock without one
            # (zookeeper) the TTL the shop gives the others (uncapped: 256 x work_ms)
            ttl_ms = getattr(lock, "ttl_ms", None) or getattr(lock, SECTION_MS, None)
            while batch := self._take_batch(ttl_ms):  # empty: the queued ones timed out
                self.batches, self.served = self.batches + 1, self.served + len(batch)
                served += batch
                serve_batch(batch, me, deps, lock)
                with self._mutex:
                    more = bool(self._queue)
                # the cohort's bound (passes, hold time, a lost lock) ends a hold
                if not more or not getattr(lock, "keep", lambda: False)():
                    break
        finally:
            try:
                release_after_section(lock, sale)
                with self._mutex:
                    self._pass_lead()  # the next lead runs before the answered buyers
            finally:
                wake(served, me)  # after the release: their responses would delay it

    def _take_batch(self, ttl_ms: int | None) -> list[Buyer]:
        with self._mutex:
            return take_batch(self._queue, self.max_batch, ttl_ms)

    def _leave(self, me: Buyer) -> None:
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

