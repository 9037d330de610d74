"""A reset's Redis side landing after a newer generation's: the newer one must stand.

A reset commits the database under the sale's row lock, then writes Redis. What other
requests write to Redis meanwhile is not ordered against it: a reload of the sale (the
contract sweep's failure: ``atomic-sharded``, Redis 294, the database 300, 0 orders,
once in session 41's CI runs), or another reset called outside HTTP's one-at-a-time lock (a
library caller; a Redis restart that lost that lock). The old code fails 4 of the 6
reload cases, all 8 two-reset cases, and 2 of the 4 steps cases."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import redis

from tests.webapp.conftest import SKU, backends, buy
from webapp import paths, saleinfo, sales
from webapp.saleinfo import forget_stale_copy, load_sale


def _a_later_reset_overtakes(monkeypatch: pytest.MonkeyPatch, shop: Any, strategy: str,
                             owner: Any, name: str) -> None:
    """Reset the sale to 5 units and, while that reset waits at its first call of
    ``owner.name``, to 7; then let the first go on, and wait for it."""
    real = getattr(owner, name)
    first_in, later_done = threading.Event(), threading.Event()
    calls: list[int] = []

    def paused(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the first reset waits for the second
            first_in.set()
            assert later_done.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, paused)
    first = threading.Thread(target=sales.reset_sale, args=(shop.sessions, shop.redis, SKU),
                             kwargs={"stock": 5, "strategy": strategy})
    first.start()
    assert first_in.wait(10)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=7, strategy=strategy)
    later_done.set()
    first.join(10)
    assert not first.is_alive()


@pytest.mark.parametrize("strategy", ["atomic", "atomic-sharded", "token", "sql"])
def test_an_earlier_resets_late_redis_side_does_not_overwrite_a_later_reset(
        client, app, monkeypatch, strategy):
    shop = backends(app)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=10, strategy=strategy)
    _a_later_reset_overtakes(monkeypatch, shop, strategy, sales, "_redis_side")

    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["consistent"]) == (
        7, 7, True), audit
    answer = buy(client, "ann")
    assert answer.status_code == 201, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit


@pytest.mark.parametrize("strategy", ["atomic-sharded", "sql"])
def test_an_earlier_resets_stock_written_after_a_later_resets_copy_does_not_stand(
        client, app, monkeypatch, strategy):
    """The paths whose reset writes the copy, then the stock, in steps: the earlier
    reset's copy went in first, the later reset wrote all of its own, then the earlier
    one's stock steps ran (``atomic-sharded``: shards of 5 over the later reset's 7)."""
    shop = backends(app)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=10, strategy=strategy)
    _a_later_reset_overtakes(monkeypatch, shop, strategy,
                             type(paths.path_for(strategy)), "reset_stock")

    answers = [buy(client, f"buyer-{n}") for n in range(3)]
    assert [answer.status_code for answer in answers] == [201] * 3, [
        answer.get_json() for answer in answers]
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (4, 3, True), audit


def _a_reset_paused_after_its_commit(monkeypatch: pytest.MonkeyPatch, shop: Any,
                                     strategy: str) -> tuple[threading.Thread, threading.Event]:
    """A reset of the sale to 7 units, in a thread, paused between its database side
    (committed on return) and its Redis side, which runs once the event is set."""
    real_redis_side = sales._redis_side
    committed, go_on = threading.Event(), threading.Event()

    def redis_side(*args: Any, **kwargs: Any) -> None:
        committed.set()
        assert go_on.wait(10)
        real_redis_side(*args, **kwargs)

    monkeypatch.setattr(sales, "_redis_side", redis_side)
    resetting = threading.Thread(target=sales.reset_sale,
                                 args=(shop.sessions, shop.redis, SKU),
                                 kwargs={"stock": 7, "strategy": strategy})
    resetting.start()
    assert committed.wait(10)
    return resetting, go_on


@pytest.mark.parametrize("strategy", ["atomic", "atomic-sharded", "sql"])
def test_a_reload_between_a_resets_commit_and_its_redis_side_stands(
        client, app, monkeypatch, strategy):
    """HTTP resets are one at a time (``admin._one_reset_at_a_time``), but not the
    buyers around them. The old sale's last buyers hear that its generation is over
    as soon as the reset commits, and each drops the stale copy
    (``saleinfo.forget_stale_copy``): the next buyer reloads the sale before the reset
    has written Redis, as a new generation (``atomic``, ``atomic-sharded``), and buys.
    The reset's Redis side, landing after, went over the reload's newer sale.

    A reset marks itself in flight, and a refused row then leaves the copy (the next
    test); here the mark is gone (it lives ``RESET_IN_FLIGHT_MS``: a reset that took
    longer, or a Redis that did not take it)."""
    shop = backends(app)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=10, strategy=strategy)
    old = load_sale(shop.sessions, SKU)
    resetting, reloaded = _a_reset_paused_after_its_commit(monkeypatch, shop, strategy)
    shop.redis.delete(old.keys.reset_in_flight)
    forget_stale_copy(shop.redis, old)  # an old buyer's row was refused
    answer = buy(client, "ann")  # reloads the sale
    reloaded.set()
    resetting.join(10)
    assert not resetting.is_alive()
    assert answer.status_code == 201, answer.get_json()

    answer = buy(client, "bob")
    assert answer.status_code == 201, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"]) == (5, 5, 2, True), audit


@pytest.mark.parametrize("strategy", ["atomic", "atomic-sharded", "sql", "token"])
def test_a_buyer_who_finds_no_copy_while_a_reset_is_in_flight_waits_for_the_resets(
        client, app, monkeypatch, caplog, strategy):
    """The old sale's last buyers, refused once the reset has committed, drop the copy,
    and the next buyer reloaded the sale as if Redis had lost it: a new generation,
    "Redis lost the sale" in the log, and for a lock strategy a hold-off of one lock TTL
    (an HTTP audit: 12 resets amid 60 buyers, 4 runs of 8). Now that buyer waits for the
    reset's copy, and buys in the reset's sale."""
    monkeypatch.setattr(saleinfo, "COPY_WAIT_S", 5.0)  # a loaded machine's 0.3 s timer
    shop = backends(app)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=10, strategy=strategy)
    old = load_sale(shop.sessions, SKU)
    resetting, go_on = _a_reset_paused_after_its_commit(monkeypatch, shop, strategy)
    new = load_sale(shop.sessions, SKU)
    forget_stale_copy(shop.redis, old)  # an old buyer's row was refused
    assert not shop.redis.exists(old.keys.info)
    threading.Timer(0.3, go_on.set).start()  # the reset's Redis side, while ann waits
    answer = buy(client, "ann")
    resetting.join(10)
    assert not resetting.is_alive()
    assert answer.status_code == 201, answer.get_json()
    assert not shop.redis.exists(old.keys.reset_in_flight)
    assert load_sale(shop.sessions, SKU).generation == new.generation  # no reload
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [], warned  # "lost the sale", or sql's "restored the Redis stock"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (6, 1, True), audit


def test_a_late_sql_mirror_does_not_mark_the_next_strategys_sale_sold_out(
        client, app, monkeypatch):
    """An ``sql`` buyer's copy write (``mirror_stock.lua``) landing after a reset to
    ``atomic-sharded`` had deleted the keys, before the reset wrote the stock's
    generation: the missing generation read as older, the copy was written and the
    sold-out flag set (the old sale had sold out), and the new sale answered 409
    ``sold_out`` to every buyer with its 5 units on the shelf (a review; the showdown
    runs ``sql``, then ``atomic-sharded``)."""
    shop = backends(app)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=1, strategy="sql")
    sql, sharded = paths.path_for("sql"), paths.path_for("atomic-sharded")
    real_mirror_after, real_reset_stock = type(sql)._mirror_after, type(sharded).reset_stock
    committed, go_on = threading.Event(), threading.Event()

    def mirror_after(self: Any, *args: Any) -> None:  # ann's, after her commit
        committed.set()
        assert go_on.wait(10)
        real_mirror_after(self, *args)

    def reset_stock(self: Any, *args: Any) -> None:  # the reset's, keys deleted
        go_on.set()
        ann.join(10)
        real_reset_stock(self, *args)

    monkeypatch.setattr(type(sql), "_mirror_after", mirror_after)
    monkeypatch.setattr(type(sharded), "reset_stock", reset_stock)
    answers: list[int] = []
    ann = threading.Thread(target=lambda: answers.append(buy(client, "ann").status_code))
    ann.start()
    assert committed.wait(10)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=5, strategy="atomic-sharded")
    assert not ann.is_alive()
    assert answers == [201]

    answer = buy(client, "bob")
    assert answer.status_code == 201, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (4, 1, True), audit


@pytest.mark.parametrize("strategy", ["atomic", "atomic-sharded", "token", "sql"])
def test_a_reset_tried_again_after_a_lost_reply_leaves_its_own_sales_alone(
        client, app, monkeypatch, strategy):
    """``sales._redis_side`` tries the Redis side again after a connection error, and
    the first try may have run, its reply lost: a buyer of the new sale may have bought
    in between. The second try rewrote the sale: stock 5 over the 4 left (``atomic``: a
    unit sold twice), and its buyers forgotten (a review)."""
    shop = backends(app)
    path = paths.path_for(strategy)
    real_reset_redis = type(path).reset_redis
    tries: list[int] = []

    def reset_redis(self: Any, *args: Any) -> None:
        tries.append(1)
        real_reset_redis(self, *args)
        if len(tries) == 1:  # it ran; a buyer comes; the reply is lost
            assert buy(client, "ann").status_code == 201
            raise redis.ConnectionError("the reply was lost")

    monkeypatch.setattr(type(path), "reset_redis", reset_redis)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=5, strategy=strategy)
    assert len(tries) == 2
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"]) == (4, 4, 1, True), audit
    again = buy(client, "ann")
    assert again.status_code == 409, again.get_json()
    assert again.get_json()["error"] == "already_purchased"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (4, 1, True), audit
