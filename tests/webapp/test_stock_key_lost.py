"""Redis loses a sale's stock key but keeps the rest of the sale (an eviction policy,
or a ``DEL`` by hand): the next buyer reloads the sale from the database, as after a
restart, instead of the sale refusing everyone for good.

A Redis audit: ``allkeys-random`` evicted ``sale:{sku}:stock`` alone; the ``atomic`` sale
answered 409 ``sold_out`` with 70 units in the database, ``token`` and ``fair`` 503
"the next buyer reloads it" for ever (the reload ran only when the hash copy was gone),
until an admin reset, which deletes the orders. ``seckill serve`` now notes a Redis
that may evict (``served.evicting_redis``); this is what is left when one does.

A missing stock key was once read as "a reset between deleting the keys and loading the
new stock", and refused without setting the sold-out flag; every reset now writes the
stock with the row (one MULTI, or the row first: ``paths._reset_in_steps``, whose paths
take no lock section and do not use the atomic scripts), so no key missing here is a
reset's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.webapp.conftest import SKU, backends, buy, empty_shop, make_app, reset
from webapp import sales
from webapp.keys import SaleKeys


@pytest.fixture
def quick_app(database_url: str, redis_url: str, redis_client: Any) -> Iterator[Flask]:
    """A shop whose lock TTL (and so a reload's hold-off) is short: 300 ms."""
    app = make_app(database_url, redis_url, LOCK_TTL_MS=300)
    empty_shop(app)
    b = backends(app)
    sales.create_product(b.sessions, SKU, "Keyboard", 4_900, stock=10, strategy="token")
    yield app
    b.close()


def buy_until_sold(client: Any, user: str, key: str | None = None, seconds: float = 10.0) -> Any:
    """Buy, retrying the 503s of a reload (and its hold-off) for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while (answer := buy(client, user, key=key)).status_code == 503 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return answer


@pytest.mark.parametrize("key", [None, "k-1"], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("strategy", ["atomic", "token", "fair"])
def test_a_sale_whose_stock_key_alone_was_lost_is_reloaded_and_sells_on(quick_app, strategy,
                                                                       key):
    client = quick_app.test_client()
    redis = backends(quick_app).redis
    reset(client, stock=5, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    assert buy(client, "bob").status_code == 201
    redis.delete(SaleKeys(SKU).stock)  # evicted: the hash copy, the buyers, all else stay

    answer = buy_until_sold(client, "carl", key=key)
    assert answer.status_code == 201, answer.get_json()
    assert not redis.exists(SaleKeys(SKU).soldout)
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (2, 3, True), audit
    assert buy(client, "ann").get_json()["error"] == "already_purchased"  # buyers kept
