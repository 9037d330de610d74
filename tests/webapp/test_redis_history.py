"""A Redis whose data has a new history (a failover, a primary failed back to, a
restart from a snapshot) holds an older copy of the sale than the database: the shop
reloads the sale from the database before it sells from it (``webapp/redishistory.py``).

Each test runs the steps Sentinel takes, by hand, on two redis-servers of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask

from lockcore.embedded import RedisServer
from tests.webapp.conftest import SKU, backends, buy, buy_after_holdoff, make_app, one_sale
from webapp import redishistory

pytestmark = pytest.mark.timeout(90)

LOCK_TTL_MS = 1_000  # the hold-off a lock path's reload starts


@pytest.fixture
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, linked; stopped by pid after the test."""
    servers = [RedisServer().start(), RedisServer().start()]
    try:
        follow(servers[1], servers[0])
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.cleanup()


def follow(replica: RedisServer, primary: RedisServer) -> None:
    """``replica`` takes ``primary``'s data (a full resync), as Sentinel has it do."""
    client = redis.Redis.from_url(replica.url)
    try:
        client.replicaof("127.0.0.1", primary.port)
        deadline = time.monotonic() + 15
        while not (client.info("replication").get("master_link_status") == "up"
                   and _offset(replica) >= _offset(primary)):
            assert time.monotonic() < deadline, "the replica never caught up"
            time.sleep(0.05)
    finally:
        client.close()


def promote(server: RedisServer) -> None:
    with redis.Redis.from_url(server.url) as client:
        client.replicaof("no", "one")


def _offset(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url) as client:
        return int(client.info("replication")["master_repl_offset"])


def stock_in(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url) as client:
        return int(client.get(f"sale:{{{SKU}}}:stock") or -1)


@pytest.fixture
def shop(sqlite_url: str, pair: tuple[RedisServer, RedisServer]) -> Iterator[Flask]:
    app = make_app(sqlite_url, pair[0].url, LOCK_TTL_MS=LOCK_TTL_MS)
    yield app
    backends(app).close()


def sold(client: Any, users: list[str]) -> list[int]:
    return [buy_after_holdoff(client, user).status_code for user in users]


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_a_primary_failed_back_to_sells_no_unit_the_database_has_sold(shop, pair, strategy):
    """The audit's steps: 3 sold on M1; M2 promoted while M1 sells the other 7; M1
    resyncs from M2 (7 units in Redis, none in the database); M1 is failed back to. It
    sold those 7 again (7 x 201; with ``token``, tokens handed out twice)."""
    primary, replica = pair
    client = shop.test_client()
    one_sale(shop, strategy, 10)
    assert sold(client, [f"a{i}" for i in range(3)]) == [201] * 3
    follow(replica, primary)
    promote(replica)  # the failover: M1 does not know yet and takes the next writes
    assert sold(client, [f"b{i}" for i in range(7)]) == [201] * 7
    follow(primary, replica)  # M1 demoted: the promoted node's older data
    assert stock_in(primary) == 7
    promote(primary)  # failed back (M2 would follow it; not needed here)
    after = sold(client, [f"c{i}" for i in range(10)])
    assert after == [409] * 10, after
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["consistent"] and audit["units_sold"] == 10, audit
    if strategy == "token":  # the fence raised past the tokens the orders carry
        tokens = [order["fencing_token"] for order in _orders(shop)]
        assert len(tokens) == len(set(tokens)) == 10, tokens


def test_a_shop_started_on_the_promoted_replica_sells_no_unit_sold_before(
        sqlite_url, pair):
    """The operator's obvious fix: restart the shop on the new primary. Its copy of the
    sale is older than the database: a new shop (a new worker) must not sell from it."""
    primary, replica = pair
    first = make_app(sqlite_url, primary.url)
    try:
        one_sale(first, "atomic", 10)
        assert sold(first.test_client(), [f"a{i}" for i in range(3)]) == [201] * 3
        follow(replica, primary)
        promote(replica)
        assert sold(first.test_client(), [f"b{i}" for i in range(7)]) == [201] * 7
    finally:
        backends(first).close()
    assert stock_in(replica) == 7
    second = make_app(sqlite_url, replica.url)
    try:
        client = second.test_client()
        assert sold(client, [f"c{i}" for i in range(5)]) == [409] * 5
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
        assert audit["consistent"] and audit["units_sold"] == 10, audit
    finally:
        backends(second).close()


@pytest.mark.parametrize("strategy", ["token", "atomic"])
def test_a_redis_restarted_from_a_snapshot_of_the_same_sale_oversells_nothing(
        sqlite_url, strategy):
    """``served.snapshot_redis``'s case: a snapshot taken within the sale, the primary
    restarted from it: 7 units in Redis, 3 in the database. The generations do not tell
    (no reset between): it sold 7 (a Redis audit: 26 oversold)."""
    server = RedisServer().start()
    app = make_app(sqlite_url, server.url, LOCK_TTL_MS=LOCK_TTL_MS)
    try:
        client = app.test_client()
        one_sale(app, strategy, 10)
        assert sold(client, [f"a{i}" for i in range(3)]) == [201] * 3
        with redis.Redis.from_url(server.url) as direct:
            direct.save()
        assert sold(client, [f"b{i}" for i in range(4)]) == [201] * 4
        server.restart()  # from the snapshot: 7 left in Redis
        assert stock_in(server) == 7
        after = sold(client, [f"c{i}" for i in range(5)])
        assert after.count(201) == 3, after
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
        assert audit["consistent"] and audit["units_sold"] == 10, audit
    finally:
        backends(app).close()
        server.cleanup()


def test_the_same_history_reloads_nothing(shop, pair):
    """Looking costs one INFO and one SET a second, and a Redis that kept its history
    keeps its copies: no reload, no hold-off."""
    client = shop.test_client()
    one_sale(shop, "token", 10)
    assert buy(client, "a").status_code == 201
    watch = backends(shop).history
    watch.check()
    watch.check()
    with redis.Redis.from_url(pair[0].url) as direct:
        assert direct.exists(f"sale:{{{SKU}}}:info") == 1
        assert direct.exists(f"sale:{{{SKU}}}:holdoff") == 0
    assert buy(client, "b").status_code == 201


def test_a_worker_looks_again_after_it_reconnects(shop, pair, monkeypatch):
    """A restart (or a failover behind one address) within a second of the last look:
    the new connection has the worker look before its next purchase."""
    client = shop.test_client()
    one_sale(shop, "atomic", 10)
    assert buy(client, "a").status_code == 201
    watch = backends(shop).history
    monkeypatch.setattr(redishistory, "CHECK_EVERY_S", 3600.0)  # only a reconnect now
    watch.check()
    assert not watch.suspect
    backends(shop).redis.connection_pool.disconnect()
    assert buy(client, "b").status_code == 201  # its command reconnects
    assert watch.suspect


def _orders(app: Flask) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from webapp.models import Order

    with backends(app).sessions() as session:
        return [{"fencing_token": order.fencing_token}
                for order in session.scalars(select(Order).where(Order.sku == SKU))]


def test_a_redis_user_without_info_still_sells_and_is_told_once(sqlite_url, pair, caplog):
    """``INFO`` is @dangerous: an ACL user without it was served before the watch; it
    still is, unwatched, and the log says so once."""
    primary = pair[0]
    with redis.Redis.from_url(primary.url) as admin:
        admin.acl_setuser("shop", enabled=True, passwords=["+pw"], keys=["*"],
                          commands=["+@all", "-@dangerous"])
    app = make_app(sqlite_url, f"redis://shop:pw@127.0.0.1:{primary.port}/0")
    try:
        one_sale(app, "atomic", 10)
        client = app.test_client()
        assert [buy(client, f"u{i}").status_code for i in range(3)] == [201] * 3
        told = [r for r in caplog.records if "refuses INFO" in r.getMessage()]
        assert len(told) == 1, told
        assert backends(app).history.off
    finally:
        backends(app).close()
