"""Units a crashed worker left "in checkout" go back on sale: the sale is reloaded.

A purchase takes its units in Redis first (``atomic``'s script; a lock section's SET),
then writes its order row. A worker killed between the two (``kill -9``, the OOM
killer, gunicorn's timeout, a host that vanished) takes neither path a failure takes:
no row, and no give-back. Its units stay taken in Redis and unsold in the database::

    worker: the script takes 1 unit (Redis 0 left); its batch's rows wait to commit
    kernel:  SIGKILL: the batch, its rows and its give-backs go with the process
    audit:   remaining 0, database_remaining 15, in_checkout 15, consistent false
    buyers:  409 sold_out, for good: a reset would bring the 15 back and delete
             every order (a multi-host audit: 15 and 3 units of 300, one host killed)

The database is right (each row takes its units off ``sales.remaining`` in its own
transaction); Redis is ahead of it. So every worker looks at its shop's sales now and
then (``gunicorn_conf.post_worker_init``): a sale whose units have stayed in checkout
(the database's ``remaining`` above Redis's stock) with nothing moving, the same
figures and the same generation, for longer than a purchase can take
(``stale_after_s``), has its Redis copy, sold-out flag and stock dropped
(``forget_stuck_sale.lua``), and the next buyer or audit reloads it from the database,
as after a Redis restart: the stock is the database's again. The generations make that
safe even if a purchase was only slow: an ``atomic`` reload starts a new one (its
buyers those with an order), so a row of the old one is refused (its buyer hears 503
and buys again); a lock path's reload holds sections off for a lock TTL, then counts
the stock from the database.
The same mends a copy a reset left behind: its database side committed, its Redis side
refused (Redis out of memory, read-only), the old stock below the new one; the copy's
generation is then the older one.

``sql`` is left alone: Redis only mirrors its database. Nothing is shared between
workers or hosts: each counts its own time, and the first to see the sale stuck
reloads it (a second drop finds the new copy and leaves it: compare-and-delete by
generation).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from .logthrottle import PER_REQUEST

logger = logging.getLogger(__name__)

#: past a purchase's longest wait (``shop.purchase_timeout_s``, the page's "no answer"),
#: how much longer units must stay put before they count as lost
GRACE_S = 15.0


class CheckoutWatch:
    """One look at every sale per ``look()``; reloads the ones stuck for ``stale_after_s``."""

    def __init__(self, sessions: Any, redis: Any, stale_after_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sessions, self.redis, self.stale_after_s = sessions, redis, stale_after_s
        self.clock = clock
        #: sku -> (the copy's generation, the database's, database remaining, Redis
        #: stock) and when first seen so
        self._seen: dict[str, tuple[tuple[int, int, int, int], float]] = {}

    def look(self) -> list[str]:
        """Look at every sale once; the skus whose copies were dropped."""
        from .commits import reading
        from .models import Sale

        with reading(self.sessions), self.sessions() as session:
            sales = session.execute(select(
                Sale.id, Sale.sku, Sale.strategy, Sale.work_ms, Sale.per_user_limit,
                Sale.initial_stock, Sale.started_at, Sale.remaining)).all()
        now, dropped = self.clock(), []
        for sku in set(self._seen) - {row.sku for row in sales}:  # deleted since
            del self._seen[sku]
        for row in sales:
            try:
                if self._stuck_for_long(row, now):
                    dropped.append(row.sku)
            except Exception as exc:  # noqa: BLE001 - one sale's trouble: the others go on
                # once a minute a kind: Redis down failed every sale every 5 s, each
                # worker (an operator audit: 36 lines in 30 s)
                PER_REQUEST.log(logger, logging.WARNING,
                                ("checkout-watch", type(exc).__name__),
                                "%s: the look for units stuck in checkout failed: %r",
                                row.sku, exc)
        return dropped

    def _stuck_for_long(self, row: Any, now: float) -> bool:
        """Whether ``row``'s sale was stuck for ``stale_after_s`` and its copy dropped."""
        from . import scripts
        from .paths import path_for
        from .saleinfo import SaleInfo, generation

        if row.strategy == "sql":  # its copy only mirrors the database
            self._seen.pop(row.sku, None)
            return False
        info = SaleInfo(row.id, row.sku, row.strategy, row.work_ms, row.per_user_limit,
                        row.initial_stock, generation(row.started_at))
        path = path_for(row.strategy, row.sku)
        stock = path.read_stock(self.redis, info)
        copied = self.redis.hget(info.keys.info, "generation")
        if (stock is None or copied is None or row.remaining <= stock
                or info.generation is None or int(copied) > info.generation):
            # no copy (the next buyer loads one), none in checkout, or a copy of a sale
            # the database never had (an admin reset mends that: saleinfo.NotReloaded)
            self._seen.pop(row.sku, None)
            return False
        figures = (int(copied), info.generation, row.remaining, stock)
        seen = self._seen.get(row.sku)
        if seen is None or seen[0] != figures:  # moving: counted from now
            self._seen[row.sku] = (figures, now)
            return False
        if now - seen[1] < self.stale_after_s:
            return False
        self._seen.pop(row.sku, None)
        keys = [info.keys.info, info.keys.soldout]
        if not path.stock_elsewhere:
            keys.append(info.keys.stock)
        # compare-and-delete: a copy written since (a reset, another reload) stays
        if not scripts.script(self.redis, "forget_stuck_sale")(keys=keys, args=[int(copied)]):
            return False
        logger.warning(
            "%s: %d unit(s) stayed in checkout for %.0fs with nothing moving (Redis %d "
            "left, the database %d): a purchase that never finished (a worker killed "
            "mid-purchase?), or a reset whose Redis side failed; the next buyer reloads "
            "the sale from the database", row.sku, row.remaining - stock, now - seen[1],
            stock, row.remaining)
        return True

    def __call__(self) -> None:
        self.look()


def watch_for(app: Any) -> CheckoutWatch | None:
    """The watch of a built shop (``create_app``), its limit from its config; None for
    an app that did not build (gunicorn then serves its error page)."""
    from .shop import purchase_timeout_s

    backends = getattr(app, "extensions", {}).get("seckill")
    if backends is None:
        return None
    stale = app.config.get("CHECKOUT_STALE_S") or purchase_timeout_s(app.config) + GRACE_S
    return CheckoutWatch(backends.sessions, backends.redis, float(stale))
