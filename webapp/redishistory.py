"""Redis's replication history, watched: a Redis whose data is older than the database's
sells nothing from it; every sale is reloaded from the database first.

**Guarantee.** A shop whose Redis started a new history (a replica promoted by a
failover, a primary failed back to, a restart from a snapshot) reloads each sale from
the database, the truth, before a purchase uses the sale's old copy, as after a Redis
that came back empty (``saleinfo.cached_sale``): the stock the database has left, its
buyers, and a lock's fencing counter raised past the tokens its orders carry.

**How.** Redis names the history of its data (``INFO replication``:
``master_replid``). A primary keeps its ID while it runs; a replica promoted starts a
new one, a replica takes its primary's, and a restart starts a new one (Redis 7.0,
even from a snapshot). The shop writes the ID it last checked its sales under into
Redis itself (``HISTORY_KEY``), where it is replicated and snapshotted with the sales.
A worker compares the two at its start, before a purchase once a second
(``CHECK_EVERY_S``), and before the next purchase after any new connection of the
purchases' pool (a restart, a failover behind a DNS name: the shop reconnects). The
worker that finds them apart swaps the key (``SET ... GET``: one worker of all wins)
and drops every sale's copy (``saleinfo.forget_stale_copy``): the next buyer reloads it.

**Failure timeline** (a Redis HA audit: Sentinel, a primary and one replica)::

    shop:     sells on primary M1 (history R1), replicated to M2
    sentinel: promotes M2 (history R2); M1 takes the shop's writes 10 s more: the
              database has those orders, M2 not the units they took
    sentinel: M1 becomes M2's replica: 63 units in Redis, none in the database
    operator: restarts the shop on M2, or fails back to M1: 63 units sold again
              (``token`` and ``atomic`` alike), fencing tokens handed out twice
    fixed:    the key says R1, Redis says R2 (or R3): each sale is reloaded from
              the database before its next purchase: 0 left, 409 sold out

The same for a primary restarted from a snapshot of the same sale (``served.
snapshot_redis``): the generations catch a snapshot from before a reset, this one
from within the sale.

**Not covered.** A purchase under way when the history changed may still use the old
copy (one per worker at most, the one whose command reconnected); a primary failed
back to within a second of a worker's last look, with no error and no reconnect in
between, is used for that second. A Redis that refuses ``INFO`` (an ACL without it) is
not watched (logged once). What the lost writes held is lost all the same: the orders
the database has are kept, the units sold on the old primary stay sold.
docs/workshop/07-failover.md is the lesson.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from .keys import SaleKeys
from .models import Product

logger = logging.getLogger(__name__)

#: where the shop keeps the history ID it checked its sales under
HISTORY_KEY = "seckill:redis-history"
#: a worker that sells looks at least this often
CHECK_EVERY_S = 1.0


class HistoryWatch:
    """One worker's watch over its Redis's history (``Backends.history``): call
    ``before_purchase`` before a purchase uses Redis; ``reconnected`` is called by each
    new connection of the purchases' pool."""

    def __init__(self, client: Any, sessions: sessionmaker[Session]) -> None:
        self.client, self.sessions = client, sessions
        self.checked_at = -CHECK_EVERY_S
        self.suspect = True  # nothing looked at yet
        self.off = False
        self._one = threading.Lock()

    def reconnected(self, connection: Any) -> None:
        """A connect callback (redis-py's ``register_connect_callback``): the Redis behind
        the address may be another one now."""
        self.suspect = True

    def before_purchase(self) -> None:
        if self.off or (not self.suspect
                        and time.monotonic() - self.checked_at < CHECK_EVERY_S):
            return
        self.check()

    def check(self) -> None:
        """Look now; reload every sale if the history changed. Redis errors propagate
        (the purchase would meet them too): the next purchase looks again."""
        with self._one:
            if not self.suspect and time.monotonic() - self.checked_at < CHECK_EVERY_S:
                return  # another greenlet of this worker looked while this one waited
            started = time.monotonic()
            self.suspect = False  # a connection made from here on sets it again
            try:
                info = self.client.info("replication")
            except redis.exceptions.NoPermissionError as exc:
                self.off = True
                logger.warning("Redis refuses INFO (%s): a failover or a restart from a "
                               "snapshot is not noticed, and the sales are not reloaded "
                               "from the database after one (webapp/redishistory.py)", exc)
                return
            except redis.RedisError:
                self.suspect = True
                raise
            replid = info.get("master_replid")
            if info.get("role") != "master" or not replid:
                self.suspect = True  # a replica refuses the purchase; look again at the next
                return
            previous = self.client.set(HISTORY_KEY, replid, get=True)
            if previous is not None and previous.decode() != replid:
                try:
                    dropped = forget_every_copy(self.client, self.sessions)
                except Exception:
                    self.client.set(HISTORY_KEY, previous)  # the next look tries again
                    self.suspect = True
                    raise
                logger.warning(
                    "Redis's data has a new history (replication ID %s, was %s): a "
                    "failover, or a restart from a snapshot. Its copy of the sales may be "
                    "older than the database: %d sales are reloaded from the database",
                    replid[:8], previous.decode()[:8], dropped)
            self.checked_at = started


def forget_every_copy(client: Any, sessions: sessionmaker[Session]) -> int:
    """Drop the Redis copy of every product's sale (compare-and-delete, as
    ``saleinfo.forget_stale_copy``: a reset's newer copy stands); the number dropped.

    A path whose reload keeps a stock it finds (a lock path: ``restore_stock``'s
    ``SET NX``) loses its stock key too. Kept, a sale the database had sold out was
    reloaded sold out (409s, nothing oversold) with the old 7 units in Redis, and the
    audit inconsistent for good: no section ran to count it again. A path that starts
    a new generation on a reload (``atomic``, ``atomic-sharded``) replaces its stock."""
    from . import scripts
    from .paths import path_for
    from .saleinfo import parsed_sale

    with sessions() as session:
        skus = list(session.scalars(select(Product.sku)))
    forget = scripts.script(client, "forget_stale_copy")
    dropped = 0
    for start in range(0, len(skus), 500):
        chunk = skus[start:start + 500]
        pipe = client.pipeline(transaction=False)
        for sku in chunk:
            pipe.hgetall(SaleKeys(sku).info)
        for sku, copy in zip(chunk, pipe.execute(), strict=True):
            if not copy:
                continue
            sale = parsed_sale(sku, copy)
            path = path_for(sale.strategy)
            with_it = ([] if path.new_generation_on_reload or path.stock_elsewhere
                       else path.stock_keys(sale))
            if sale.generation is None:  # a copy of before generations: as it is
                dropped += int(client.delete(sale.keys.info, *with_it) > 0)
            else:
                dropped += int(forget(keys=[sale.keys.info, *with_it],
                                      args=[sale.generation]))
    return dropped


def history_watch_for(app: Any) -> HistoryWatch | None:
    """The watch of a built shop (``create_app``); None for an app that did not build."""
    backends = getattr(app, "extensions", {}).get("seckill")
    return None if backends is None else backends.history
