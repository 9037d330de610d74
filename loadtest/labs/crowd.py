"""A crowd of buyers hitting the served storefront at the same moment, then the audit.

The storefront labs (process-lock, oversell) run the real thing: gunicorn with several
gevent workers (``webapp.serve.ServedApp``), each purchase a real HTTP request. Every
buyer thread waits on one start event, so the requests arrive together, as in a flash
sale, and not spread over the time it takes to start threads. The number of buyers
and of threads is bounded, all on loopback.

The verdict comes from the shop's own audit (``GET /api/sales/<sku>/audit``): orders
are counted in the database, so an oversold sale shows ``units_sold > initial_stock``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadtest.shop import ShopClient

from .narration import Narrator

if TYPE_CHECKING:
    from webapp.served import ServedApp

SKU = "sku-1"
MAX_THREADS = 100
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SaleResult:
    strategy: str
    statuses: dict[int, int]
    audit: dict[str, Any]

    @property
    def oversold(self) -> int:
        return int(self.audit["oversold"])

    @property
    def units_sold(self) -> int:
        return int(self.audit["units_sold"])


def _buy(url: str, user_id: str) -> int:
    request = urllib.request.Request(
        f"{url}/api/products/{SKU}/purchase", method="POST",
        data=json.dumps({"user_id": user_id}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)


@contextlib.contextmanager
def lab_storefront(workers: int) -> Iterator[ServedApp]:
    """The storefront a lab serves: its own Redis and SQLite, and none of the shop
    settings in the user's environment (``webapp.config.is_shop_setting``): ServedApp
    hands its shop the environment it runs in, and a stray ``LOCK_TTL_MS=1`` made the
    oversell lab's ``token`` oversell and its verdict NOT DEMONSTRATED. They are back
    once the storefront has stopped."""
    from webapp.config import is_shop_setting
    from webapp.serve import ServedApp  # the web app is only needed by the storefront labs

    stray = {name: os.environ.pop(name) for name in list(os.environ) if is_shop_setting(name)}
    try:
        with ServedApp(workers=workers, redlock_urls=[]) as app:
            yield app
    finally:
        os.environ.update(stray)


@contextlib.contextmanager
def crowd_at_the_gate(threads: int) -> Iterator[tuple[ThreadPoolExecutor, threading.Event]]:
    """A pool of ``threads`` buyers and the gate they wait at, to start all at once.

    Leaving, the gate opens whatever happened and the pool is not waited for: Ctrl-C
    (or SIGTERM) before ``start.set()`` left every buyer waiting on the event and the
    pool waiting on them, for ever. The started ones go on (the lab then stops the shop
    or Redis under them) and the queued ones are dropped. (``process-lock``'s act 1
    had its own pool, waited for on the way out: a SIGTERM at that moment hung the lab
    past a fresh-clone CI run's 60 s.)"""
    start = threading.Event()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="buyer")
    try:
        yield pool, start
    finally:
        start.set()
        pool.shutdown(wait=False, cancel_futures=True)


def flash_sale(narrator: Narrator, app: Any, strategy: str, *, buyers: int, stock: int,
               work_ms: int = 0) -> SaleResult:
    """Reset the sale to ``stock`` units under ``strategy``; ``buyers`` buy at once; audit."""
    shop = ShopClient(app.url, app.admin_token)
    shop.reset_sale(SKU, stock=stock, strategy=strategy, work_ms=work_ms)
    threads = min(buyers, MAX_THREADS)
    narrator("sale reset: %d units of %s, strategy %s, %d ms of work under the lock; "
             "%d buyers on %d threads", stock, SKU, strategy, work_ms, buyers, threads)

    with crowd_at_the_gate(threads) as (pool, start):

        def buyer(i: int) -> int:
            start.wait()
            return _buy(app.url, f"buyer-{i}")

        futures = [pool.submit(buyer, i) for i in range(buyers)]
        start.set()
        statuses = Counter(f.result() for f in futures)
    narrator("responses: %s", ", ".join(f"{n} x {code}" for code, n in sorted(statuses.items())))
    audit = shop.audit(SKU)
    narrator("audit: %d orders for %d units, Redis says %d remaining, oversold %d, "
             "consistent %s", audit["orders"], audit["initial_stock"], audit["remaining"],
             audit["oversold"], audit["consistent"])
    return SaleResult(strategy, dict(statuses), audit)
