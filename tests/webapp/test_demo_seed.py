"""``demo.seed``, which ``seckill serve`` runs at every start on ``./instance/``: a
restart keeps the sales, their orders and their stock (the audit's verdict survives)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy.orm import sessionmaker

from lockcore.embedded import RedisServer
from webapp import db, demo, sales
from webapp.extensions import make_engine
from webapp.services import Checkout, PurchaseRequest, checkout


@pytest.fixture
def shop(tmp_path) -> Iterator[tuple[str, Any]]:
    url = f"sqlite:///{tmp_path / 'instance.sqlite'}"
    db.upgrade(url)
    engine = make_engine(url)
    yield url, sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


def buy(sessions: Any, client: Any, sku: str, user: str) -> None:
    deps = Checkout(sessions=sessions, redis=client, lock_for=lambda sale, user: None,
                    sleep=lambda seconds: None)
    checkout(deps, PurchaseRequest(sku, user))


def test_a_restart_on_the_same_database_keeps_orders_and_stock(shop, redis_client, redis_url):
    url, sessions = shop
    demo.seed(url, redis_url)
    buy(sessions, redis_client, "sku-2", "early-bird")  # sku-2 is the demo's atomic sale
    demo.seed(url, redis_url)  # seckill serve again, same Redis
    found = sales.audit(sessions, redis_client, "sku-2")
    assert found["orders"] == 1 and found["remaining"] == 49 and found["consistent"], found
    # ... and with a fresh embedded Redis, as `seckill serve` starts one each time
    fresh = RedisServer().start()
    try:
        client = redis.Redis.from_url(fresh.url)
        demo.seed(url, fresh.url)
        found = sales.audit(sessions, client, "sku-2")
        assert found["orders"] == 1 and found["remaining"] == 49 and found["consistent"], found
        client.close()
    finally:
        fresh.cleanup()


def test_reset_restocks_every_sale_and_deletes_its_orders(shop, redis_client, redis_url):
    url, sessions = shop
    demo.seed(url, redis_url)
    buy(sessions, redis_client, "sku-2", "early-bird")
    demo.seed(url, redis_url, reset=True)
    found = sales.audit(sessions, redis_client, "sku-2")
    assert found["orders"] == 0 and found["remaining"] == 50 and found["consistent"], found


def test_a_restart_into_an_empty_redis_says_it_loaded_the_sales_not_that_redis_lost_them(
        shop, redis_url, caplog):
    """Every ``seckill serve`` after the first in a folder warned "sku-2: Redis lost the
    sale; reloaded as a new generation" and "restored the Redis stock" for each sale: its
    embedded Redis starts empty by design (a CLI audit). A buyer's reload still warns."""
    import logging

    url, sessions = shop
    demo.seed(url, redis_url)
    fresh = RedisServer().start()
    try:
        with caplog.at_level(logging.INFO, logger="webapp"):
            demo.seed(url, fresh.url, fresh_redis=True)  # as seckill serve's own Redis
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warned == [], warned
        loaded = [r.getMessage() for r in caplog.records if "loaded the sale of" in r.getMessage()]
        assert len(loaded) == len(demo.PRODUCTS), caplog.text
        client = redis.Redis.from_url(fresh.url)
        client.delete("sale:{sku-2}:info")  # lost now, with the shop running
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="webapp"):
            buy(sessions, client, "sku-2", "after-the-loss")
        assert "sku-2: Redis lost the sale" in caplog.text
        client.close()
    finally:
        fresh.cleanup()


def test_a_restart_on_a_given_redis_that_lost_a_sale_still_warns(shop, redis_url,
                                                                 redis_client, caplog):
    """A Redis given by URL that lacks a sale lost it (a review: the start's quiet
    load also hid a loss on a shared Redis)."""
    import logging

    url, sessions = shop
    demo.seed(url, redis_url)
    redis_client.delete("sale:{sku-2}:info")
    with caplog.at_level(logging.WARNING, logger="webapp"):
        demo.seed(url, redis_url)
    assert "sku-2: Redis lost the sale" in caplog.text


def test_a_restart_with_a_reset_mark_left_in_redis_starts(shop, redis_url, redis_client,
                                                          caplog):
    """A mark left by a reset that failed (``SaleKeys.reset_in_flight``) and no copy:
    the start leaves that sale to its first buyer, as for a lock server that does not
    answer, and starts (``Busy`` ended ``seckill serve``; a review)."""
    import logging
    import time

    url, sessions = shop
    demo.seed(url, redis_url)
    redis_client.delete("sale:{sku-2}:info", "sale:{sku-3}:info")
    redis_client.set("sale:{sku-2}:reset_in_flight", 1, px=10_000)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="webapp"):
        demo.seed(url, redis_url)
    assert time.monotonic() - started < 3.0
    assert "sku-2 not reloaded into Redis" in caplog.text
    assert redis_client.exists("sale:{sku-3}:info")  # the sales after it are loaded


@pytest.mark.parametrize("field, most", [("name", 200), ("description", 500)])
def test_a_name_or_description_longer_than_its_column_is_refused_naming_it(shop, field, most):
    # SQLite stored a 10,000-character name past String(200), which PostgreSQL refuses,
    # and its card stretched the storefront (a text audit)
    _, sessions = shop
    text = {"name": "Lamp", "description": ""}
    with pytest.raises(ValueError, match=f"^the product's {field} is {most + 1} characters "
                                         f"long; its column holds at most {most}$"):
        sales.create_product(sessions, "sku-long", **{**text, field: "x" * (most + 1)},
                             price_cents=100, stock=1, strategy="atomic")
    assert sales.create_product(sessions, "sku-long", **{**text, field: "x" * most},
                                price_cents=100, stock=1, strategy="atomic")


def test_every_demo_product_fits_its_columns():
    for sku, name, _, _, _, description in demo.PRODUCTS:
        assert len(name) <= 200 and len(description) <= 500, sku
