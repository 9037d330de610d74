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


@pytest.mark.parametrize("lost", ["stock", "stockgen"])
def test_an_atomic_sharded_sale_whose_shard_lost_a_key_is_reloaded_and_sells_on(quick_app,
                                                                                 lost):
    """A shard's stock key lost alone read as 0 (its units gone: once the other shards
    were empty, 409 ``sold_out`` with units in the database, for good), its generation
    key lost alone as a reset since (503 for good), in an eviction audit. Neither is
    what a reset or a reload leaves (they write a shard's two keys in one script): the
    buyer drops the sale's copy, and the next reloads the sale, every shard with it."""
    from webapp.sharding import DEFAULT_SHARDS, shard_gen_key, shard_key

    client = quick_app.test_client()
    redis = backends(quick_app).redis
    reset(client, stock=2 * DEFAULT_SHARDS, strategy="atomic-sharded")
    assert buy(client, "ann").status_code == 201
    for index in range(DEFAULT_SHARDS):  # every shard's key of that kind: the buyer's too
        redis.delete((shard_key if lost == "stock" else shard_gen_key)(SKU, index))

    answer = buy_until_sold(client, "carl")
    assert answer.status_code == 201, answer.get_json()
    for n in range(2 * DEFAULT_SHARDS - 2):  # the rest sells: no unit stranded
        assert buy_until_sold(client, f"buyer-{n}").status_code == 201, n
    assert buy(client, "last").get_json()["error"] == "sold_out"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == \
        (0, 2 * DEFAULT_SHARDS, True), audit
