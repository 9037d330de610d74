"""A lock section's late give-back after Redis lost the sale: the reload counted it.

A section whose row failed after its lock ran out gives its units back later, under the
lock (``orders.give_back_under_lock``). A lock path's reload keeps the sale's
generation, so the generation alone did not tell a stock read again from the database,
which counts those units already (no row holds them), from the stock they were taken
from (session 42's note)::

    ann:    holds the lock: reads 10, sets 9; her row's write waits for the database
    redis:  restarts empty: the stock, the sale, ann's lock are gone
    ann:    her write fails; her lock is gone: her unit goes back later
    bob:    reloads the sale (the database: 10 left); after the hold-off reads 10,
            sets 9, writes his row: Redis 9, the database 9
    settle: ann's unit goes back: Redis 10, the database 9: one unit sold twice

Now every copy of the sale carries a load of its own (``saleinfo.sale_fields``), the
section reads it with the stock, and the late give-back happens only in that load
(``give_back_once.lua``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.webapp.conftest import SKU, backends, empty_shop, make_app
from webapp import orders, sales, sectionorders


def _shop(database_url: str, redis_url: str, combine: bool) -> Any:
    app = make_app(database_url, redis_url, LOCK_TTL_MS=300, LOCK_TIMEOUT_S=5.0,
                   LOCK_COHORT=False, LOCK_COMBINE=combine)
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="token")
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=10, strategy="token")
    return app


def _buy(app: Any, user: str) -> int:
    return int(app.test_client().post(f"/api/products/{SKU}/purchase",
                                      json={"user_id": user}).status_code)


@pytest.mark.parametrize("combine", [False, True], ids=["plain", "combined"])
def test_a_late_give_back_after_a_reload_is_not_counted_twice(
        database_url, redis_url, redis_client, monkeypatch, combine):
    app = _shop(database_url, redis_url, combine)
    in_write, lost = threading.Event(), threading.Event()

    def stalled(real: Any) -> Any:
        def write(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "ann":  # Redis restarts meanwhile
                in_write.set()
                assert lost.wait(10)
                raise OperationalError("INSERT INTO orders", {}, Exception("stalled"))
            return real(*args, **kwargs)
        return write

    if combine:
        monkeypatch.setattr(sectionorders, "insert_batch", stalled(sectionorders.insert_batch))
    else:
        monkeypatch.setattr(orders, "insert_order", stalled(orders.insert_order))
    answers: dict[str, int] = {}
    ann = threading.Thread(target=lambda: answers.update(ann=_buy(app, "ann")), name="ann")
    ann.start()
    assert in_write.wait(10)
    assert redis_client.get(f"sale:{{{SKU}}}:stock") == b"9"
    redis_client.flushall()  # our own server: a restart without persistence
    lost.set()
    ann.join(15)
    assert answers == {"ann": 503}
    # her unit waits for the lock, in her worker; bob buys in another (its purchases
    # would settle hers first: in one process, they share the queue)
    waiting = list(orders.IN_DOUBT.waiting)
    assert [(e.user_id, e.failed) for e in waiting] == [("ann", True)]
    orders.IN_DOUBT.waiting.clear()

    deadline = time.monotonic() + 10  # the reload, its hold-off, then bob's purchase
    while (status := _buy(app, "bob")) == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status == 201
    orders.IN_DOUBT.waiting.extend(waiting)  # her worker's next drain
    orders.IN_DOUBT.next_drain = 0.0
    orders.IN_DOUBT.drain()
    assert not orders.IN_DOUBT
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"]) == (9, 9, 1, True), audit
    backends(app).close()
