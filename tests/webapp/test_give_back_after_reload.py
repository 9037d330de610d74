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

Now every copy of the sale and every count of its stock from the database carries a
load of its own (``saleinfo.new_load``), the section reads it with the stock, and the
late give-back happens only in that load (``give_back_once.lua``). A review found the
other cases here: a count without a reload, a copy from before loads, and the
sold-out flag over a unit that a count will have.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.webapp.conftest import SKU, backends, empty_shop, make_app
from webapp import orders, saleinfo, sales, section, sectionorders
from webapp.keys import SaleKeys

KEYS = SaleKeys(SKU)


def _shop(database_url: str, redis_url: str, combine: bool, stock: int = 10) -> Any:
    app = make_app(database_url, redis_url, LOCK_TTL_MS=300, LOCK_TIMEOUT_S=5.0,
                   LOCK_COHORT=False, LOCK_COMBINE=combine)
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=stock,
                         strategy="token")
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=stock, strategy="token")
    return app


def _buy(app: Any, user: str) -> int:
    return int(app.test_client().post(f"/api/products/{SKU}/purchase",
                                      json={"user_id": user}).status_code)


def _buy_once_held_off(app: Any, user: str) -> int:
    """A purchase, tried again through the reload's hold-off (503)."""
    deadline = time.monotonic() + 10
    while (status := _buy(app, user)) == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


def _ann_fails_late(app: Any, monkeypatch: Any, combine: bool,
                    meanwhile: Callable[[], None]) -> list[Any]:
    """Ann takes a unit; while her row's write waits, ``meanwhile`` runs (it takes her
    lock away); then her write fails. Returns her unit's late give-back, taken out of
    the worker's queue: in her worker, while the next buyers buy in another (in one
    process they share the queue, and their purchases would settle hers first)."""
    in_write, done = threading.Event(), threading.Event()

    def stalled(real: Any) -> Any:
        def write(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "ann":
                in_write.set()
                assert done.wait(10)
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
    meanwhile()
    done.set()
    ann.join(15)
    assert answers == {"ann": 503}
    waiting = list(orders.IN_DOUBT.waiting)
    assert [(e.user_id, e.failed) for e in waiting] == [("ann", True)]
    orders.IN_DOUBT.waiting.clear()
    return waiting


def _settle(waiting: list[Any]) -> None:
    """Her worker's next drain."""
    orders.IN_DOUBT.waiting.extend(waiting)
    orders.IN_DOUBT.next_drain = 0.0
    orders.IN_DOUBT.drain()
    assert not orders.IN_DOUBT


def _books(app: Any) -> tuple[Any, ...]:
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    return (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"])


both = pytest.mark.parametrize("combine", [False, True], ids=["plain", "combined"])


@both
@pytest.mark.parametrize("copy", ["copy", "copy-before-loads"])
def test_a_late_give_back_after_a_reload_is_not_counted_twice(
        database_url, redis_url, redis_client, monkeypatch, combine, copy):
    app = _shop(database_url, redis_url, combine)
    if copy == "copy-before-loads":  # written by a version before loads: it has none
        redis_client.hdel(KEYS.info, "load")

    def restart() -> None:
        assert redis_client.get(KEYS.stock) == b"9"
        redis_client.flushall()  # our own server: a restart without persistence

    waiting = _ann_fails_late(app, monkeypatch, combine, restart)
    assert _buy_once_held_off(app, "bob") == 201  # the reload, its hold-off, his unit
    _settle(waiting)
    assert _books(app) == (9, 9, 1, True)
    backends(app).close()


@both
def test_a_late_give_back_after_a_count_without_a_reload_is_not_counted_twice(
        database_url, redis_url, redis_client, monkeypatch, combine):
    """A reset that could not reach its lock server holds the sections off
    (``section.hold_off``) and may then fail: the first section after counts the stock
    from the database, with no reload and no new copy."""
    app = _shop(database_url, redis_url, combine)
    shop = backends(app)

    def lock_lost_and_held_off() -> None:
        redis_client.delete("lock:{stock:" + SKU + "}")  # her lock ran out
        section.hold_off(shop.redis, saleinfo.cached_sale(shop.redis, shop.sessions, SKU), 0)

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost_and_held_off)
    assert _buy(app, "bob") == 201  # counts 10 from the database, sells him 1
    _settle(waiting)
    assert _books(app) == (9, 9, 1, True)
    shop.close()


@both
def test_a_late_give_back_refused_for_a_reload_lifts_the_sold_out_flag(
        database_url, redis_url, redis_client, monkeypatch, combine):
    """The copy alone evicted, and reloaded with the stock key kept (its SET is NX): the
    stock is counted again only in a section, and the flag sent every buyer away before
    one (a review)."""
    app = _shop(database_url, redis_url, combine, stock=1)

    def lock_lost() -> None:
        redis_client.delete("lock:{stock:" + SKU + "}")

    waiting = _ann_fails_late(app, monkeypatch, combine, lock_lost)
    assert _buy(app, "bob") == 409  # refused at 0: the sold-out flag
    assert redis_client.exists(KEYS.soldout)
    redis_client.delete(KEYS.info)  # evicted
    assert _books(app)[:2] == (0, 1)  # the audit reloads the sale; Redis keeps its 0
    _settle(waiting)  # refused: the reload's count will have her unit
    assert _buy_once_held_off(app, "carl") == 201
    assert _books(app) == (0, 0, 1, True)
    backends(app).close()
