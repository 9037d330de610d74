"""A `token` sale whose order write stalls, then fails: the lock sections' late
give-back tests (``test_give_back_after_expiry``, ``test_give_back_after_reload``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import OperationalError

from tests.webapp.conftest import SKU, backends, empty_shop, make_app
from webapp import orders, sales, sectionorders


def token_worker(database_url: str, redis_url: str, combine: bool, ttl_ms: int) -> Any:
    """A worker of the shop, its lock paths plain or combined (``LOCK_COMBINE``)."""
    return make_app(database_url, redis_url, LOCK_TTL_MS=ttl_ms, LOCK_TIMEOUT_S=5.0,
                    LOCK_COHORT=False, LOCK_COMBINE=combine)


def token_shop(database_url: str, redis_url: str, combine: bool, ttl_ms: int,
               stock: int = 10) -> Any:
    """``token_worker``, the shop emptied and ``SKU`` on sale with ``token``."""
    app = token_worker(database_url, redis_url, combine, ttl_ms)
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=stock,
                         strategy="token")
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=stock, strategy="token")
    return app


def stall_then_fail(monkeypatch: Any, combine: bool, thread: str,
                    meanwhile: Callable[[], None]) -> None:
    """The order write of the thread named ``thread`` (a plain section's
    ``orders.insert_order``, a combined batch's ``sectionorders.insert_batch``) runs
    ``meanwhile``, then fails as a database that stalled and gave up; every other
    thread's writes as usual."""
    def stalled(real: Any) -> Any:
        def write(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == thread:
                meanwhile()
                raise OperationalError("INSERT INTO orders", {}, Exception("stalled"))
            return real(*args, **kwargs)
        return write

    if combine:
        monkeypatch.setattr(sectionorders, "insert_batch", stalled(sectionorders.insert_batch))
    else:
        monkeypatch.setattr(orders, "insert_order", stalled(orders.insert_order))
