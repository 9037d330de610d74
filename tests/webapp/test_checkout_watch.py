"""Units a killed worker left in checkout go back on sale (``webapp/checkoutwatch.py``):
a sale whose units have stayed taken in Redis and unsold in the database, with nothing
moving, for longer than a purchase can take, is reloaded from the database.

A crash is played by taking units in Redis the way a purchase does and writing no row
(the worker died before its batch committed): a multi-host audit lost 15 of 300 units
of an ``atomic`` sale that way, one host killed, for good."""

from __future__ import annotations

import pytest

from tests.webapp.conftest import SKU, backends, buy, buy_after_holdoff, reset
from webapp import paths, saleinfo
from webapp.checkoutwatch import CheckoutWatch, watch_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _crashed_purchase(app, units: int) -> None:
    """Take ``units`` as a purchase takes them, and write no row (nor give them back)."""
    shop = backends(app)
    sale = saleinfo.load_sale(shop.sessions, SKU)
    path = paths.path_for(sale.strategy)
    if path.stock_elsewhere:  # atomic-sharded: take them off its shards in turn
        from webapp.sharding import shard_key

        keys = [shard_key(SKU, index) for index in range(path.shards)]
        for _ in range(units):
            key = next(key for key in keys if int(shop.redis.get(key) or 0) > 0)
            shop.redis.decr(key)
        return
    left = path.read_stock(shop.redis, sale)
    shop.redis.set(sale.keys.stock, left - units)


def _audit(client):
    return client.get(f"/api/sales/{SKU}/audit").get_json()


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_units_a_crashed_purchase_left_in_checkout_go_back_on_sale(app, client, strategy):
    reset(client, stock=5, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    _crashed_purchase(app, 2)
    audit = _audit(client)
    assert (audit["remaining"], audit["in_checkout"], audit["consistent"]) == (2, 2, False)
    shop, clock = backends(app), Clock()
    watch = CheckoutWatch(shop.sessions, shop.redis, stale_after_s=60, clock=clock)
    assert watch.look() == []  # first seen
    clock.now += 59
    assert watch.look() == []  # not yet: a purchase may still be writing its row
    clock.now += 2
    assert watch.look() == [SKU]
    sold = [buy_after_holdoff(client, f"buyer-{n}").status_code for n in range(5)]
    assert sold == [201] * 4 + [409], sold  # the two are back: 4 of 5 left after ann
    audit = _audit(client)
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (0, 5, True), audit


@pytest.mark.parametrize("strategy", ["atomic", "token", "atomic-sharded"])
def test_a_sale_the_crash_sold_out_sells_again_to_buyers_alone(app, client, strategy):
    # a review: the copy alone was dropped; the sold-out flag answered every buyer 409
    # before any looked for it, and a lock path's reload kept the stale stock. Only an
    # audit (which reloads the copy) hid it: no audit here until the buyers are done
    reset(client, stock=3, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    _crashed_purchase(app, 2)  # the last two units
    assert buy(client, "bob").status_code == 409  # sold out: the flag goes up
    shop, clock = backends(app), Clock()
    watch = CheckoutWatch(shop.sessions, shop.redis, stale_after_s=60, clock=clock)
    assert watch.look() == []
    clock.now += 61
    assert watch.look() == [SKU]
    assert watch.look() == []  # and once only
    sold = [buy_after_holdoff(client, name).status_code for name in ("bob", "cy", "dan")]
    assert sold == [201, 201, 409], sold
    audit = _audit(client)
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (0, 3, True), audit


def test_units_on_the_move_are_not_taken_for_lost(app, client):
    reset(client, stock=9, strategy="atomic")
    _crashed_purchase(app, 1)  # one in checkout...
    shop, clock = backends(app), Clock()
    watch = CheckoutWatch(shop.sessions, shop.redis, stale_after_s=60, clock=clock)
    assert watch.look() == []
    for n in range(3):  # ...but the sale sells on: the figures move, counted afresh
        clock.now += 40
        assert buy(client, f"buyer-{n}").status_code == 201
        assert watch.look() == []
    clock.now += 59
    assert watch.look() == []
    clock.now += 2
    assert watch.look() == [SKU]


def test_a_settled_sale_and_an_sql_sale_are_left_alone(app, client):
    shop, clock = backends(app), Clock()
    watch = CheckoutWatch(shop.sessions, shop.redis, stale_after_s=1, clock=clock)
    reset(client, stock=3, strategy="atomic")
    assert buy(client, "ann").status_code == 201
    watch.look()
    clock.now += 10
    assert watch.look() == []  # nothing in checkout
    reset(client, stock=3, strategy="sql")
    _crashed_purchase(app, 1)  # a copy behind its database: the next purchase mirrors it
    watch.look()
    clock.now += 10
    assert watch.look() == []


def test_the_limit_is_past_a_purchases_longest_wait(app):
    from webapp.shop import purchase_timeout_s

    assert watch_for(app).stale_after_s > purchase_timeout_s(app.config)
    app.config["CHECKOUT_STALE_S"] = 3
    assert watch_for(app).stale_after_s == 3


def test_a_worker_killed_mid_purchase_leaves_no_units_lost_for_good(tmp_path):
    """The real thing: gunicorn's worker SIGKILLed while three ``atomic`` purchases sit
    in their simulated work, units taken, rows unwritten; its successor's watch finds
    them stuck and the sale reloaded (``SECKILL_CHECKOUT_STALE_S``: 2 s, not ~50), and
    they sell again."""
    import contextlib
    import os
    import signal
    import threading
    import time
    from pathlib import Path

    from tests.webapp.served import call
    from tests.webapp.served import reset_sale as reset_served
    from webapp.serve import ServedApp

    with ServedApp(workers=1, env={"SECKILL_CHECKOUT_STALE_S": "2"}) as shop:
        reset_served(shop, SKU, stock=5, strategy="atomic", work_ms=4000)
        def buy_served(user: str) -> None:
            with contextlib.suppress(OSError):  # the worker dies with the connection
                call(f"{shop.url}/api/products/{SKU}/purchase", "POST", {"user_id": user})

        buyers = [threading.Thread(target=buy_served, args=(f"b{n}",)) for n in range(3)]
        for buyer in buyers:
            buyer.start()
        deadline = time.monotonic() + 10
        while (audit := call(f"{shop.url}/api/sales/{SKU}/audit")[1])["in_checkout"] < 3:
            assert time.monotonic() < deadline, audit
            time.sleep(0.1)
        assert shop.proc is not None
        children = Path(f"/proc/{shop.proc.pid}/task/{shop.proc.pid}/children")
        (worker,) = [int(pid) for pid in children.read_text().split()]
        os.kill(worker, signal.SIGKILL)
        for buyer in buyers:
            buyer.join(30)
        # buyers alone (an audit reloads a copy itself): the killed worker's three,
        # refused until the sale is reloaded, and two more
        waiting, deadline = ["b0", "b1", "b2", "c0", "c1"], time.monotonic() + 40
        while waiting:
            assert time.monotonic() < deadline, waiting
            for user in list(waiting):
                status, _ = call(f"{shop.url}/api/products/{SKU}/purchase", "POST",
                                 {"user_id": user})
                if status == 201:
                    waiting.remove(user)
            time.sleep(0.5)
        status, audit = call(f"{shop.url}/api/sales/{SKU}/audit")
        assert (audit["remaining"], audit["orders"], audit["consistent"]) == (0, 5, True), \
            audit


def test_a_redis_that_is_down_is_one_line_a_minute(app, caplog):
    # every sale failed every 5 s, each worker, a line each (an operator audit)
    import logging

    import redis

    from webapp.logthrottle import PER_REQUEST

    PER_REQUEST.forget()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    down = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    watch = CheckoutWatch(backends(app).sessions, down, stale_after_s=1)
    with caplog.at_level(logging.WARNING, logger="webapp.checkoutwatch"):
        for _ in range(3):
            assert watch.look() == []
    lines = [r for r in caplog.records if "units stuck in checkout failed" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    PER_REQUEST.forget()
