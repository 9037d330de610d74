"""Build the lock that guards one sale's stock, with the backend its strategy needs.

``lockcore.create`` is the only constructor. The safe single-Redis strategies wait with
``notify`` (a BLPOP woken by the release, seed 000's closing question), so a thousand
waiters do not poll Redis; the others poll. ``multi`` takes the stock *and* the
buyer, all or nothing (seed 003's batch lock).

Each strategy locks a key of its own (``token``, the one the workshop shows, keeps the
plain ``stock:{sku}``). The recipes store different things under the key: ``getset`` a
timestamp, the others a random token. On one shared key, a reset from ``setnx-expire``
to ``getset`` while a leftover buyer still held the old lock made ``getset`` parse that
token as a timestamp: ``ValueError``, a 500 on the next reset and on every purchase.
"""

from __future__ import annotations

import functools
from typing import Any

import lockcore
from lockcore.registry import lock_class

from .cohort import CohortLock
from .combining import SECTION_MS, CombinableLock
from .extensions import Backends
from .problems import InvalidRequest
from .services import SaleInfo

#: strategies whose waiters cannot BLPOP on one Redis
_POLLING = {"local", "redlock", "zookeeper"}
#: the seeds' unsafe recipes poll (every 300-500 ms there); polling is also what lets
#: several waiters see "free" at once, so their race shows. ``notify`` would hand the
#: lock to one waiter at a time and hide it.
_SEED_POLLING = {"naive", "setnx", "setnx-expire", "getset"}


def backend_for(strategy: str, backends: Backends) -> Any:
    """The client ``strategy`` locks on; raises ``Busy`` if it is not configured."""
    if strategy == "local":
        return None
    if strategy == "redlock":
        return backends.redlock
    if strategy == "zookeeper":
        return backends.zookeeper
    return backends.redis


def missing_backend(strategy: str, config: dict[str, Any]) -> str | None:
    """Why this server cannot lock for ``strategy``; None if it can."""
    if strategy == "redlock" and not config["REDLOCK_URLS"]:
        return "strategy 'redlock' needs REDLOCK_URLS (five Redis servers)"
    if strategy == "zookeeper" and not config["ZOOKEEPER_HOSTS"]:
        return "strategy 'zookeeper' needs ZOOKEEPER_HOSTS"
    if strategy == "zookeeper" and not kazoo_installed():
        return KAZOO_MISSING
    return None


#: the shop has ZOOKEEPER_HOSTS but not the client library (a base install)
KAZOO_MISSING = ("strategy 'zookeeper' needs kazoo, which is not installed "
                 "(pip install 'seckill[zookeeper]', or kazoo)")


def kazoo_installed() -> bool:
    try:
        import kazoo.client  # noqa: F401  (imported once, then a dict lookup)
    except ImportError:
        return False
    return True


def check_configured(strategy: str, config: dict[str, Any]) -> None:
    """Refuse (400) to select a strategy whose backend this server does not have."""
    missing = missing_backend(strategy, config)
    if missing is not None:
        raise InvalidRequest(missing)


def configured(strategy: str, config: dict[str, Any]) -> bool:
    """Whether this server has the backend ``strategy`` locks on."""
    return missing_backend(strategy, config) is None


def stock_resource(sku: str, strategy: str) -> str:
    """The lock resource guarding ``sku``'s stock under ``strategy``."""
    return f"stock:{sku}" if strategy == "token" else f"stock:{sku}:{strategy}"


@functools.cache  # the registry is fixed: asked once per purchase, answered once per name
def cohorted(strategy: str) -> bool:
    """Whether ``strategy``'s lock may be passed between the buyers of one worker: safe
    locks on the stock key alone (``multi`` also locks the buyer)."""
    return strategy != "multi" and bool(lock_class(strategy).safe)


#: a smaller combined section for the FIFO lock: a section serves its worker's queue
#: before the other worker's buyers, so the bigger it is, the less first-come-first-served
#: across workers (the spike's first 100 buyers served: 0.34-0.75 at 256, 0.88 at 64;
#: docs/performance.md, session 7)
_COMBINE_BATCH_CAP = {"fair": 64}


def lock_for(backends: Backends, sale: SaleInfo, user_id: str) -> Any:
    """The lock for one purchase (or a reset): a ``lockcore`` lock, or with
    ``LOCK_COHORT`` a handle that queues in this worker's cohort for it (``cohort.py``),
    or with ``LOCK_COMBINE`` either one with this worker's combiner (``combining.py``)."""
    config = backends.config
    if not cohorted(sale.strategy):
        return _new_lock(backends, sale, user_id)
    queue = local_queue(backends, sale)
    lock: Any = (CohortLock(backends.cohorts.for_key(queue),
                            lambda: _new_lock(backends, sale, user_id))
                 if config["LOCK_COHORT"] else _new_lock(backends, sale, user_id))
    if config["LOCK_COMBINE"]:
        max_batch = min(config["LOCK_COMBINE_MAX_BATCH"],
                        _COMBINE_BATCH_CAP.get(sale.strategy, config["LOCK_COMBINE_MAX_BATCH"]))
        combiner = backends.cohorts.combiner_for(queue, max_batch)
        lock = CombinableLock(lock, combiner)
    return lock


def local_queue(backends: Backends, sale: SaleInfo) -> str:
    """The name of this worker's cohort and combiner for ``sale``'s lock: the lock's
    resource and its TTL. A held lock is passed on (``cohort.py``) or kept for another
    batch (``combining.py``) only within one queue, so only to sections of the work its
    TTL was sized for (``lock_ttl_ms``); buyers of a sale with other work queue apart and
    take the lock themselves.

    **Failure timeline** of one queue per resource (an HTTP audit: ``token``,
    ``LOCK_TTL_MS`` 1000, two workers, a crowd)::

        reset:   the same strategy, work_ms 0 -> 1500; in one worker, a buyer of the
                 old sale waits for the lock, one of the new sale queues behind it
        old:     takes the lock with the old sale's TTL, 1 s (1000 + 2 x 0 ms); its
                 section is over at once, and the hold is young: kept for the next batch
        new:     its section on that lock works 1.5 s; the lock expires after 1 s
        worker2: takes the lock and reads the stock the first has not written yet:
                 both sell the unit (7 orders for 6 units, oversold, in 6 runs of 6)
    """
    return f"{stock_resource(sale.sku, sale.strategy)} ttl={lock_ttl_ms(backends, sale)}"


def raise_fence(backends: Backends, sale: SaleInfo, issued: int, *,
                hold: bool = True) -> int | None:
    """Make the next fencing tokens of ``sale``'s lock exceed ``issued``, the highest its
    orders carry: for when Redis lost its data and its counter with it
    (``saleinfo._restore_stock``). The lock-free paths have no lock to raise.

    Answers the hold-off the reload is to start with the stock (``restore_sale.lua``;
    ``section.hold_off``): None for a lock-free path, else the ms no section may sell,
    0 for none (but the stock read again from the database by the first section). One
    lock TTL for a lock path, unless ``hold`` is False: the seed at start, before any of
    the shop's workers runs."""
    if sale.strategy not in lockcore.names():
        return None
    # The lock may have gone with the data while its holder is still in its section: no
    # section sells until it would have run out (``section.py``). A lock kept elsewhere
    # (RedLock's nodes, ZooKeeper, the process) still excludes: its sections need only
    # read the stock from the database, with no hold-off.
    kept_elsewhere = sale.strategy in ("local", "redlock", "zookeeper")
    hold_ms = 0 if kept_elsewhere or not hold else lock_ttl_ms(backends, sale)
    # ``local`` lives in the process; ZooKeeper keeps its sequence numbers on its disk
    if sale.strategy in ("local", "zookeeper"):
        return hold_ms
    if not configured(sale.strategy, backends.config):
        return hold_ms  # no lock to buy with either: the purchase answers 503
    _new_lock(backends, sale, "fence").fence_at_least(issued)
    return hold_ms


def lock_ttl_ms(backends: Backends, sale: SaleInfo) -> int:
    """The TTL of ``sale``'s lock: it must outlive the section it guards, simulated work
    included (and a reload after Redis lost its data holds sales off this long)."""
    return int(backends.config["LOCK_TTL_MS"]) + 2 * sale.work_ms


def _new_lock(backends: Backends, sale: SaleInfo, user_id: str) -> lockcore.DistributedLock:
    strategy = sale.strategy
    resource: Any = stock_resource(sale.sku, strategy)
    if strategy == "multi":
        resource = [resource, f"buyer:{sale.sku}:{user_id}"]
    ttl_ms = lock_ttl_ms(backends, sale)
    wait = "poll" if strategy in _POLLING | _SEED_POLLING else "notify"
    # RedLock retries after a random delay; a short one makes contenders split the votes
    # (1000 buyers on 2 cores: 50 ms -> 907 of 1000 got 503; 200 ms -> 69)
    poll_ms = 200 if strategy == "redlock" else 20
    lock = lockcore.create(strategy, backend_for(strategy, backends), resource,
                           ttl_ms=ttl_ms, wait=wait, poll_ms=poll_ms)
    # A lock with no TTL (zookeeper: the session is the lease) still has buyers waiting
    # on it: a batch with simulated work is cut to the TTL the others get (SECTION_MS)
    setattr(lock, SECTION_MS, ttl_ms)
    return lock
