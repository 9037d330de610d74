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
(``stale_after_s``), has its Redis copy dropped (``saleinfo.forget_stale_copy``), and
the next buyer or audit reloads it from the database, as after a Redis restart: the
stock is the database's again, the buyers those with an order. The generations make
that safe even if a purchase was only slow: an ``atomic`` reload starts a new one, so
a row of the old one is refused (its buyer hears 503 and buys again); a lock path's
reload holds sections off for a lock TTL, then counts the stock from the database.

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
        #: sku -> (generation, database remaining, Redis stock) and when first seen so
        self._seen: dict[str, tuple[tuple[int | None, int, int], float]] = {}

    def look(self) -> list[str]:
        """Look at every sale once; the skus whose copies were dropped."""
        from .commits import reading
        from .models import Sale
        from .paths import path_for
        from .saleinfo import forget_stale_copy
        from .sales import _info

        with reading(self.sessions), self.sessions() as session:
            sales = list(session.scalars(select(Sale)))
        now, dropped = self.clock(), []
        for sale in sales:
            if sale.strategy == "sql":
                self._seen.pop(sale.sku, None)
                continue
            info = _info(sale)
            stock = path_for(sale.strategy).read_stock(self.redis, info)
            if stock is None or sale.remaining <= stock:  # no copy, or none in checkout
                self._seen.pop(sale.sku, None)
                continue
            figures = (info.generation, sale.remaining, stock)
            seen = self._seen.get(sale.sku)
            if seen is None or seen[0] != figures:  # moving: counted from now
                self._seen[sale.sku] = (figures, now)
                continue
            if now - seen[1] < self.stale_after_s:
                continue
            logger.warning(
                "%s: %d unit(s) stayed in checkout for %.0fs with nothing moving (Redis "
                "%d left, the database %d): a purchase that never finished (a worker "
                "killed mid-purchase?); the sale is reloaded from the database",
                sale.sku, sale.remaining - stock, now - seen[1], stock, sale.remaining)
            forget_stale_copy(self.redis, info)
            self._seen.pop(sale.sku, None)
            dropped.append(sale.sku)
        return dropped

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
