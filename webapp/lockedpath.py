"""``LockedPath``: every ``lockcore`` strategy sells through it.

Lock, GET, simulated work, SET, order, release. The read-modify-write is deliberate:
under a broken lock two buyers read the same stock, both write ``stock - 1`` and one
update is lost: the sale oversells. The order row is written *inside* the section, so
a reset, which waits for the sale's lock, never sees a purchase land after it while the
lock lives; a row whose write outlived the lock is refused by its generation
(``section.py``).

With ``LOCK_COHORT`` (the default) a safe lock comes from ``locks.lock_for`` as a
``CohortLock``: this section is unchanged, but ``release`` may pass the still-held lock
to the worker's next buyer instead of releasing it (``cohort.py``). Orders of one
cohort then share a fencing token.

With ``LOCK_COMBINE`` the lock comes wrapped with the worker's combiner and the
purchase goes to it instead: the holder serves every buyer queued in its worker in one
section (``combining.py``).
"""

from __future__ import annotations

import functools
from typing import Any

from lockcore.registry import lock_class

from .combining import CombinableLock
from .deadlines import set_stock
from .orders import Relock, record_order
from .paths import StockPath
from .problems import Busy, not_enough
from .section import (
    flag_sold_out,
    lease_renewed,
    lock_timed_out,
    release_after_section,
    still_held,
    stock_if_still,
)
from .services import Checkout, PurchaseRequest, SaleInfo, less_time


class LockedPath(StockPath):
    def __init__(self, strategy: str) -> None:
        self.strategy = strategy

    @property
    def safe(self) -> bool:  # type: ignore[override]
        return bool(lock_class(self.strategy).safe)

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        """Lock-path buyers of one worker queue for a slot first (PURCHASE_CONCURRENCY):
        every waiter holds a Redis connection (a BLPOP) and every runnable greenlet slows
        the holder's round trips. A combined lock's buyers wait in their worker instead,
        so theirs is one section's worth (``combined_slots``). The lock-free paths take
        no slot: they hold nothing while they wait, and the cap halved atomic's
        purchases/s (see performance.md)."""
        lock = deps.lock_for(sale, request.user_id)
        combined = isinstance(lock, CombinableLock)
        slots = (deps.combined_slots if combined and deps.combined_slots is not None
                 else deps.lock_slots)
        if slots is not None:
            started = deps.monotonic()
            if not slots.acquire(timeout=deps.lock_timeout_s):
                raise Busy("too many purchases in progress, try again shortly")
            # one LOCK_TIMEOUT_S for the slot and the lock together: waited in full
            # twice, a buyer outwaited the page's "no answer" (35 s)
            deps = less_time(deps, deps.monotonic() - started)
        try:
            if combined:  # LOCK_COMBINE: one section for the batch
                return lock.combiner.purchase(deps, sale, request, lock)
            return self._locked_purchase(deps, sale, request, lock)
        finally:
            if slots is not None:
                slots.release()

    def _locked_purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest,
                         lock: Any) -> Any:
        if not lock.acquire(blocking=True, timeout=deps.lock_timeout_s):
            raise lock_timed_out(deps, sale, lock)
        try:
            stock, generation = stock_if_still(deps, sale, lock.fencing_token)
            if stock < request.quantity:
                if stock <= 0:
                    flag_sold_out(deps.redis, sale, generation)
                raise not_enough(sale.sku, stock)
            self._work(deps, sale)
            still_held(lock, sale)  # told it was lost meanwhile: sell nothing
            set_stock(deps.redis, sale.keys.stock, stock - request.quantity,
                      generation=generation, generation_key=sale.keys.stock_gen)
            return record_order(deps.sessions, deps.redis, sale, request.user_id,
                                request.quantity, lock.fencing_token, request.idempotency_key,
                                generation=generation,
                                relock=Relock(functools.partial(deps.lock_for, sale,
                                                                "settle")),
                                lease=functools.partial(lease_renewed, lock))
        finally:
            release_after_section(lock, sale)
