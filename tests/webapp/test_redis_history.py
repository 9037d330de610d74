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


def snapshot(client: Any) -> None:
    """``SAVE``, once a background save is done: a replica's full sync runs one on its
    primary ("Background save already in progress" in a suite run)."""
    deadline = time.monotonic() + 15
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        assert time.monotonic() < deadline, "the background save never ended"
        time.sleep(0.05)
    client.save()


def stock_in(server: RedisServer) -> int:
    """The sale's stock in ``server``, once it has loaded its data (a restart from an
    append-only file answers "LOADING" for a moment)."""
    deadline = time.monotonic() + 15
    with redis.Redis.from_url(server.url) as client:
        while True:
            try:
                return int(client.get(f"sale:{{{SKU}}}:stock") or -1)
            except redis.exceptions.BusyLoadingError:
                assert time.monotonic() < deadline, "Redis never finished loading"
                time.sleep(0.05)


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
            snapshot(direct)
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
    """Looking costs one INFO and one GET a second, and a Redis that kept its history
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


def test_a_reconnect_to_the_same_redis_sells_on_and_a_restarted_one_is_refused(
        shop, pair, monkeypatch):
    """The reconnect happens inside a purchase that has looked already: the new
    connection asks on its own. The same history (the pool growing, a blip): sold on,
    no look owed. A new one (a restart at the same address, within a second of the
    worker's last look): that purchase is refused, and the next looks first."""
    client = shop.test_client()
    one_sale(shop, "atomic", 10)
    assert buy(client, "a").status_code == 201
    watch = backends(shop).history
    monkeypatch.setattr(redishistory, "CHECK_EVERY_S", 3600.0)  # only a reconnect now
    watch.check()
    pool = backends(shop).redis.connection_pool
    pool.disconnect()
    assert buy(client, "b").status_code == 201  # its command reconnects
    assert not watch.suspect
    with redis.Redis.from_url(pair[0].url) as direct:
        snapshot(direct)  # 8 left in the snapshot
    assert buy(client, "c").status_code == 201  # 7 left in Redis and the database
    pair[0].restart()
    refused = buy(client, "d")
    assert refused.status_code == 503, refused.get_json()
    assert "new history" in refused.get_json()["detail"]
    assert watch.suspect
    assert sold(client, [f"e{i}" for i in range(8)]).count(201) == 7
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["consistent"] and audit["units_sold"] == 10, audit


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
        told = [r for r in caplog.records if "refuses the look" in r.getMessage()]
        assert len(told) == 1, told
        assert backends(app).history.off
    finally:
        backends(app).close()


@pytest.fixture
def restarted(sqlite_url: str) -> Iterator[tuple[Flask, RedisServer]]:
    """An ``atomic`` sale of 10: 3 sold, a snapshot, 7 more sold (none left in the
    database), Redis restarted from the snapshot (7 left in Redis). The watch has
    looked before the restart."""
    server = RedisServer().start()
    app = make_app(sqlite_url, server.url)
    try:
        client = app.test_client()
        one_sale(app, "atomic", 10)
        assert sold(client, [f"a{i}" for i in range(3)]) == [201] * 3
        with redis.Redis.from_url(server.url) as direct:
            snapshot(direct)
        assert sold(client, [f"b{i}" for i in range(7)]) == [201] * 7
        server.restart()
        assert stock_in(server) == 7
        yield app, server
    finally:
        backends(app).close()
        server.cleanup()


def test_a_drop_that_fails_midway_is_done_at_the_next_look(restarted, monkeypatch):
    """The new history was recorded first (``SET ... GET``), then the copies dropped: a
    drop that failed (Redis gone midway), or a lost reply to the SET, left it recorded
    with the stale copy in Redis, and no later look reloaded it (a review: 7 of 7 sold
    again). Recorded after the drop, the next look drops it."""
    app, _ = restarted
    client = app.test_client()

    def gone_midway(*args: Any) -> Any:
        raise redis.ConnectionError("Redis went away midway")

    monkeypatch.setattr(redishistory, "forget_stale_copies", gone_midway)
    # the reconnect's refusal, then the look's failure: 503s, nothing sold
    assert [buy(client, f"x{i}").status_code for i in range(3)] == [503] * 3
    monkeypatch.undo()
    time.sleep(redishistory.RETRY_LOOK_S)  # then the next buyer looks again
    after = sold(client, [f"c{i}" for i in range(1, 8)])
    assert after == [409] * 7, after


def test_a_look_under_way_is_waited_for_by_the_workers_other_buyers(restarted,
                                                                     monkeypatch):
    """One buyer's look found the change and drops the copies; a second buyer of the
    same worker went past it (it had looked under a second before) and sold from the
    old copy (a review: the database's remaining went to -1)."""
    import threading

    app, _ = restarted
    watch = backends(app).history
    entered, go = threading.Event(), threading.Event()
    real = redishistory.forget_stale_copies

    def slow(*args: Any) -> Any:
        entered.set()
        go.wait(10)
        return real(*args)

    monkeypatch.setattr(redishistory, "forget_stale_copies", slow)
    assert buy(app.test_client(), "x").status_code == 503  # the reconnect's refusal
    first: list[int] = []
    looking = threading.Thread(
        target=lambda: first.append(buy(app.test_client(), "c0").status_code))
    looking.start()
    try:
        assert entered.wait(10)
        assert watch.reloading
        second: list[int] = []
        buying = threading.Thread(
            target=lambda: second.append(buy(app.test_client(), "c1").status_code))
        buying.start()
        buying.join(0.5)
        assert buying.is_alive(), second  # waits for the look
    finally:
        go.set()
        looking.join(10)
    buying.join(10)
    assert first == [409] and second == [409], (first, second)


@pytest.mark.parametrize("strategy", ["token", "atomic"])
def test_a_restart_that_lost_nothing_reloads_nothing(sqlite_url, strategy, caplog):
    """An append-only file synced ``always`` (what docs/deployment.md recommends) comes
    back as it was, with a new history all the same: reloading every sale cost a lock
    sale a hold-off of one lock TTL and an ``atomic`` one a new generation (a review).
    Only a sale whose Redis stock is above the database's is reloaded."""
    server = RedisServer(args=["--appendonly", "yes", "--appendfsync", "always"]).start()
    app = make_app(sqlite_url, server.url, LOCK_TTL_MS=5_000)
    try:
        client = app.test_client()
        one_sale(app, strategy, 10)
        assert sold(client, [f"a{i}" for i in range(3)]) == [201] * 3
        server.restart()
        assert stock_in(server) == 7
        first = buy(client, "b0")  # its reconnect finds the new history: refused
        assert first.status_code == 503 and "new history" in first.get_json()["detail"]
        assert buy(client, "b1").status_code == 201  # looked: nothing stale, no hold-off
        said = [r.getMessage() for r in caplog.records  # the watch's, not an undo's
                if r.name == "webapp.redishistory" and "new history" in r.getMessage()]
        assert len(said) == 1 and "1 sales, 0 had more stock" in said[0], said
    finally:
        backends(app).close()
        server.cleanup()


def test_a_redis_with_info_renamed_still_sells(sqlite_url, tmp_path):
    """``rename-command INFO ""``: a plain ResponseError, not NOPERM, and every purchase
    was a 503 for good (a review). serve starts on such a Redis unchecked: so does
    the watch."""
    import subprocess

    from lockcore.embedded import free_port

    port = free_port()  # RedisServer waits for INFO: a process of the test's own
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
                               "--rename-command", "INFO", ""],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    app = None
    try:
        direct = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                direct.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.05)
        direct.close()
        app = make_app(sqlite_url, f"redis://127.0.0.1:{port}/0")
        one_sale(app, "atomic", 10)
        client = app.test_client()
        assert [buy(client, f"u{i}").status_code for i in range(3)] == [201] * 3
        assert backends(app).history.off
    finally:
        if app is not None:
            backends(app).close()
        server.kill()
        server.wait()


def test_a_write_refused_for_a_moment_does_not_turn_the_watch_off(restarted):
    """A refusal during the look's drop (NOREPLICAS: ``min-replicas-to-write``, which the
    docs suggest; out of memory) turned the watch off for the worker's life, and its
    next snapshot restart sold 7 of 7 again (a review). It is looked at again."""
    app, server = restarted
    client = app.test_client()
    with redis.Redis.from_url(server.url) as direct:
        direct.config_set("min-replicas-to-write", 1)  # every write refused, for now
        try:
            assert [buy(client, f"x{i}").status_code for i in range(2)] == [503] * 2
        finally:
            direct.config_set("min-replicas-to-write", 0)
    assert not backends(app).history.off
    time.sleep(redishistory.RETRY_LOOK_S)
    assert sold(client, [f"c{i}" for i in range(7)]) == [409] * 7


def test_an_audit_clears_a_new_history_with_no_buyer(restarted):
    """Only a purchase looked: until a buyer came, every new connection was refused,
    the audit and the admin reset that mends a sale too (a review)."""
    app, _ = restarted
    client = app.test_client()
    answers = []
    for _ in range(3):
        answers.append(client.get(f"/api/sales/{SKU}/audit"))
        if answers[-1].status_code == 200:
            break
    assert answers[-1].status_code == 200, [a.get_json() for a in answers]
    assert answers[-1].get_json()["consistent"], answers[-1].get_json()


def test_buyers_after_a_failed_look_hear_503_at_once_not_in_turn(shop, monkeypatch):
    """Redis frozen: each buyer owing a look waited for the one before it, then looked
    again (k x the socket timeout: the 8th answered after 7.7 s). For a moment after a
    failed look, they hear 503 without looking."""
    one_sale(shop, "atomic", 10)
    watch = backends(shop).history
    looks = []

    def frozen(*args: Any, **kwargs: Any) -> Any:
        looks.append(1)
        raise redis.TimeoutError("Timeout reading from socket")

    watch.suspect = True
    monkeypatch.setattr(watch.client, "info", frozen)
    with pytest.raises(redis.TimeoutError):
        watch.before_purchase()
    client = shop.test_client()
    answers = [buy(client, f"u{i}") for i in range(5)]
    assert [a.status_code for a in answers] == [503] * 5
    assert "did not answer a look" in answers[0].get_json()["detail"]
    assert len(looks) == 1
