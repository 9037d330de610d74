"""The two ends every lock section shares: the stock read, refused when a reset
switched the sale's strategy, and the release, which says when the lock ran out first.

Each strategy locks a key of its own (``locks.stock_resource``), so two buyers exclude
each other only while they use the same strategy. A buyer carries the strategy it
looked up when its request began; a reset may switch the sale to another strategy
before that buyer gets its lock.

**Failure timeline** the guard prevents::

    buyer:  looks the sale up (``token``), waits for the token lock, held by a reset
    reset:  switches the sale to ``fair``, sets stock 100, releases the token lock
    buyer:  gets the token lock: it excludes nobody now, the fair buyers hold another
    buyer:  GET 100 while a fair buyer also reads 100; both SET 99 and write an
            order: two orders, one unit off the stock, the sale oversells
    guard:  the read fetches the sale's strategy in the same round trip; it is not
            ``token`` any more, so the buyer leaves with 503 busy and takes nothing

The check costs no extra round trip: GET and HGET go in one pipeline. The plain
locked path (``lockedpath.py``) and a combined batch (``allocation.py``) both read the
stock through here, and both release through ``release_after_section``: a lock whose
TTL ran out inside the section is logged (seed 004's lesson), never raised over the
buyer's answer.
"""

from __future__ import annotations

import logging
from typing import Any

from lockcore import LockNotOwned

from .problems import Busy
from .services import Checkout, SaleInfo

logger = logging.getLogger(__name__)


def stock_if_still(deps: Checkout, sale: SaleInfo) -> int:
    """The stock, read in one round trip with the sale's current strategy.

    :raises Busy: the sale was reset to another strategy since ``sale`` was looked up,
        or Redis lost it (restarted empty).
    """
    pipe = deps.redis.pipeline(transaction=False)
    pipe.get(sale.keys.stock)
    pipe.hget(sale.keys.info, "strategy")
    stock, strategy = pipe.execute()
    if stock is None or strategy is None:
        # Redis lost its data (a restart) since the buyer looked the sale up. No stock
        # key is not "0 left": read as 0, the section set the sold-out flag, which
        # answered every later buyer 409 before any of them could reload the sale
        raise Busy(f"Redis lost the sale of {sale.sku} (restarted?); the next buyer "
                   "reloads it from the database: try again", retry_after_s=1)
    if strategy.decode() != sale.strategy:
        raise Busy(f"the sale of {sale.sku} was reset to another strategy; try again",
                   retry_after_s=1)
    return int(stock)


def release_after_section(lock: Any, sale: SaleInfo) -> None:
    """Release ``lock``; a failure is logged, not raised: the section's answer stands."""
    try:
        lock.release()
    except LockNotOwned:  # the TTL ran out inside the section: the seed 004 lesson
        logger.warning("%s lock on %s expired before release", sale.strategy, sale.sku)
    except Exception:
        logger.exception("releasing the %s lock on %s failed", sale.strategy, sale.sku)
