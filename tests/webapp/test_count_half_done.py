"""A count of the stock whose database side committed and whose Redis side never ran.

After Redis lost a lock path's sale, the first section after the hold-off counts the
stock from the database as a new generation (``saleinfo.new_generation``), then writes
the count into Redis (``reread_stock.lua``). A Redis error between the two (or the
worker killed there) left the copy at the old generation with its ``reloaded`` mark,
and every later section tried to start the new generation from the old one again,
matched no row, and answered 503 ("reset since this purchase looked it up"): the sale
sold nothing until an admin reset (a review)::

    bob:    reloads the sale; after the hold-off counts it: the database g0 -> g1
    redis:  the count's write fails; the copy stays g0, marked for a count
    carl:   g0 -> g1 again matches nothing: 503
    dora:   the same, and every buyer after her, for good

Now a count that finds the sale moved on drops the copy if it is still the one it read
(``saleinfo.forget_stale_copy``): the next buyer reloads the sale at g1 and counts it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.webapp.conftest import SKU, backends, buy, buy_after_holdoff
from tests.webapp.lategiveback import token_shop
from webapp import scripts, section

pytestmark = pytest.mark.timeout(60)

#: the lock's, and the hold-off's after a reload
TTL_MS = 300


@pytest.fixture(params=[False, True], ids=["plain", "combined"])
def shop(request: Any, database_url: str, redis_url: str) -> Iterator[Any]:
    app = token_shop(database_url, redis_url, request.param, TTL_MS)
    yield app
    backends(app).close()


def _the_count_fails_in_redis_once(monkeypatch: Any) -> list[str]:
    """``reread_stock.lua`` raises once, as a Redis gone between the count's two
    steps; returns the list its one failure is noted in."""
    failed: list[str] = []
    real = scripts.script

    def script(redis: Any, name: str) -> Any:
        if name != "reread_stock" or failed:
            return real(redis, name)

        def fail(*args: Any, **kwargs: Any) -> Any:
            failed.append(name)
            raise RedisConnectionError("Connection reset by peer")
        return fail

    monkeypatch.setattr(section.scripts, "script", script)
    return failed


def _buy_retrying_503s(client: Any, user: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while (response := buy(client, user)).status_code == 503 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return response


def test_a_count_cut_off_before_redis_does_not_stop_the_sale(shop, redis_client,
                                                             monkeypatch):
    failed = _the_count_fails_in_redis_once(monkeypatch)
    client = shop.test_client()
    redis_client.flushall()  # our own server: a restart without persistence
    # the reload, its hold-off, then the count that fails half-way
    assert buy_after_holdoff(client, "bob").status_code == 503
    assert failed == ["reread_stock"]
    assert redis_client.exists(f"sale:{{{SKU}}}:reloaded")  # still marked for a count
    carl = _buy_retrying_503s(client, "carl")
    assert carl.status_code == 201, carl.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"]) == (9, 9, 1, True), audit
