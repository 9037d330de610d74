"""Purchase paths: how a sale takes units off its stock, by strategy name.

* every ``lockcore`` strategy -> ``LockedPath``: lock, GET, simulated work, SET, order,
  release. The read-modify-write is deliberate: under a broken lock two buyers read
  the same stock, both write ``stock - 1`` and one update is lost: the sale oversells.
* ``atomic`` -> one Lua script checks and decrements; no lock at all (seed 002's
  lesson taken to its end: the cheapest lock is none).
* ``sql`` -> ``UPDATE sales SET remaining = remaining - :q WHERE remaining >= :q`` and
  the order insert in one transaction; Redis follows after the commit.

A path also owns how its stock is laid out in Redis (``load_stock``/``read_stock``),
so a sharded path can be added with ``register("atomic-sharded", ShardedPath())``.
"""

from __future__ import annotations

import logging
from typing import Any

import lockcore
from lockcore import LockNotOwned
from lockcore.registry import lock_class

from . import scripts
from .orders import insert_order, record_order
from .problems import Busy, InvalidRequest, SoldOut
from .services import Checkout, PurchaseRequest, SaleInfo

logger = logging.getLogger(__name__)


class StockPath:
    """A way to sell; the default stock layout is one integer key per sale."""

    safe = True

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        raise NotImplementedError

    def load_stock(self, redis: Any, sale: SaleInfo, stock: int) -> None:
        redis.set(sale.keys.stock, stock)

    def read_stock(self, redis: Any, sale: SaleInfo) -> int:
        return int(redis.get(sale.keys.stock) or 0)

    def _work(self, deps: Checkout, sale: SaleInfo) -> None:
        if sale.work_ms > 0:  # simulated business work: widens any race to see it
            deps.sleep(sale.work_ms / 1000)


class LockedPath(StockPath):
    def __init__(self, strategy: str) -> None:
        self.strategy = strategy

    @property
    def safe(self) -> bool:  # type: ignore[override]
        return bool(lock_class(self.strategy).safe)

    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        """Lock-path buyers of one worker queue for a slot first (PURCHASE_CONCURRENCY):
        every waiter holds a Redis connection (a BLPOP) and every runnable greenlet slows
        the holder's round trips. The lock-free paths take no slot: they hold nothing
        while they wait, and the cap halved atomic's purchases/s (see performance.md)."""
        slots = deps.lock_slots
        if slots is not None and not slots.acquire(timeout=deps.lock_timeout_s):
            raise Busy("too many purchases in progress, try again shortly")
        try:
            return self._locked_purchase(deps, sale, request)
        finally:
            if slots is not None:
                slots.release()

    def _locked_purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        lock = deps.lock_for(sale, request.user_id)
        if not lock.acquire(blocking=True, timeout=deps.lock_timeout_s):
            raise Busy(f"the stock lock for {sale.sku} was not free within "
                       f"{deps.lock_timeout_s:g}s", retry_after_s=1)
        try:
            stock = self._stock_if_still(deps, sale)
            if stock < request.quantity:
                if stock <= 0:
                    deps.redis.set(sale.keys.soldout, 1)
                raise SoldOut(f"{sale.sku} is sold out" if stock <= 0
                              else f"only {stock} left of {sale.sku}")
            self._work(deps, sale)
            deps.redis.set(sale.keys.stock, stock - request.quantity)
            return record_order(deps.sessions, deps.redis, sale, request.user_id,
                                request.quantity, lock.fencing_token, request.idempotency_key)
        finally:
            try:
                lock.release()
            except LockNotOwned:  # the TTL ran out inside the section: the seed 004 lesson
                logger.warning("%s lock on %s expired before release", sale.strategy, sale.sku)
            except Exception:
                logger.exception("releasing the %s lock on %s failed", sale.strategy, sale.sku)


    def _stock_if_still(self, deps: Checkout, sale: SaleInfo) -> int:
        """The stock, read in the same round trip as the sale's current strategy. A buyer
        who looked the sale up before a reset switched its strategy holds the *old*
        strategy's lock, which no longer excludes anyone: it must not touch the stock."""
        pipe = deps.redis.pipeline(transaction=False)
        pipe.get(sale.keys.stock)
        pipe.hget(sale.keys.info, "strategy")
        stock, strategy = pipe.execute()
        if strategy is not None and strategy.decode() != sale.strategy:
            raise Busy(f"the sale of {sale.sku} was reset to another strategy; try again",
                       retry_after_s=1)
        return int(stock or 0)


class AtomicPath(StockPath):
    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        self._work(deps, sale)
        take = scripts.script(deps.redis, "atomic_purchase")
        left = int(take(keys=[sale.keys.stock, sale.keys.soldout],
                        args=[request.quantity, sale.per_user_limit]))
        if left == -2:
            raise InvalidRequest(f"at most {sale.per_user_limit} per buyer")
        if left < 0:
            raise SoldOut(f"{sale.sku} is sold out")
        return record_order(deps.sessions, deps.redis, sale, request.user_id,
                            request.quantity, None, request.idempotency_key)


class SqlPath(StockPath):
    def purchase(self, deps: Checkout, sale: SaleInfo, request: PurchaseRequest) -> Any:
        # the work happens before the transaction: under gevent a SQLite transaction
        # must not yield (see orders.py)
        self._work(deps, sale)
        try:
            order = insert_order(deps.sessions, sale, request.user_id, request.quantity,
                                 None, request.idempotency_key, conditional=True)
        except SoldOut:
            if self.read_stock(deps.redis, sale) <= 0:
                deps.redis.set(sale.keys.soldout, 1)
            raise
        deps.redis.decrby(sale.keys.stock, request.quantity)  # keep the storefront in step
        return order


def _builtin() -> dict[str, StockPath]:
    paths: dict[str, StockPath] = {name: LockedPath(name) for name in lockcore.names()}
    paths["atomic"] = AtomicPath()
    paths["sql"] = SqlPath()
    from .sharding import ShardedPath  # imports this module: only once it is loaded

    paths["atomic-sharded"] = ShardedPath()
    return paths


_PATHS: dict[str, StockPath] | None = None


def _paths() -> dict[str, StockPath]:
    global _PATHS
    if _PATHS is None:
        _PATHS = _builtin()
    return _PATHS


def register(name: str, path: StockPath) -> None:
    """Offer one more strategy to sales (e.g. ``atomic-sharded``)."""
    _paths()[name] = path


def names() -> list[str]:
    return list(_paths())


def path_for(name: str) -> StockPath:
    try:
        return _paths()[name]
    except KeyError:
        raise InvalidRequest(f"unknown strategy {name!r}; choose one of "
                             f"{', '.join(_paths())}") from None
