"""Orders written after Redis restarted empty carry fencing tokens above the earlier ones'.

``seckill serve`` runs an embedded Redis without persistence. Before this fix, its lock
counters started again at 1 after a restart, so the orders after it carried tokens the
sale had already handed out (the contract audit found it). The sale is reloaded from the
database then, by the first buyer or by the demo seed at start, and both now raise the
lock's counter past the highest token in the sale's orders first.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from lockcore.embedded import EmbeddedRedis, RedisServer
from tests.webapp.conftest import backends, buy, buy_after_holdoff, empty_shop, make_app
from webapp import demo, locks, sales
from webapp.extensions import Backends

SAFE_FENCED = ["token", "fair", "multi", "redlock"]


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """The shop's Redis, this test's own: it is restarted empty."""
    with EmbeddedRedis(nodes=1) as cluster:
        yield cluster.servers[0]


def _first_start(database_url: str, redis: RedisServer, strategy: str,
                 redlock_urls: list[str]) -> list[int]:
    """A shop selling ``sku-1`` under ``strategy``; three orders; their tokens."""
    app = make_app(database_url, redis.url, REDLOCK_URLS=redlock_urls)
    try:
        empty_shop(app)
        b = backends(app)
        sales.create_product(b.sessions, "sku-1", "Keyboard", 4_900, stock=10,
                             strategy=strategy)
        sales.reset_sale(b.sessions, b.redis, "sku-1", stock=10, strategy=strategy)
        client = app.test_client()
        tokens = []
        for user in ("ann", "bob", "cy"):
            response = buy(client, user)
            assert response.status_code == 201, response.get_json()
            tokens.append(response.get_json()["fencing_token"])
        return tokens
    finally:
        backends(app).close()


def _restart_empty(redis: RedisServer, cluster: Any) -> None:
    redis.restart()
    if cluster is not None:
        for server in cluster.servers:
            server.kill()
            server.start()


def _buy_after_restart(database_url: str, redis: RedisServer,
                       redlock_urls: list[str]) -> dict[str, Any]:
    app = make_app(database_url, redis.url, REDLOCK_URLS=redlock_urls, LOCK_TTL_MS=300)
    try:
        response = buy_after_holdoff(app.test_client(), "dee")
        assert response.status_code == 201, response.get_json()
        found = sales.audit(backends(app).sessions, backends(app).redis, "sku-1")
        assert found["orders"] == 4 and found["consistent"], found
        return dict(response.get_json())
    finally:
        backends(app).close()


@pytest.fixture(params=SAFE_FENCED)
def strategy(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, list[str]]]:
    if request.param != "redlock":
        yield request.param, None, []
        return
    cluster = request.getfixturevalue("redlock_cluster")
    for server in cluster.servers:
        server.start()  # a previous test may have killed one
    yield request.param, cluster, cluster.urls


def test_the_first_buyer_after_the_restart_raises_the_fence(database_url, own_redis,
                                                            strategy):
    name, cluster, redlock_urls = strategy
    before = _first_start(database_url, own_redis, name, redlock_urls)
    assert before == sorted(before) and len(set(before)) == 3, before
    _restart_empty(own_redis, cluster)
    order = _buy_after_restart(database_url, own_redis, redlock_urls)
    assert order["fencing_token"] > max(before), (before, order)


def test_the_demo_seed_at_start_raises_the_fence(sqlite_url, own_redis, strategy):
    name, cluster, redlock_urls = strategy
    before = _first_start(sqlite_url, own_redis, name, redlock_urls)
    _restart_empty(own_redis, cluster)
    config = make_app(sqlite_url, own_redis.url, REDLOCK_URLS=redlock_urls).config
    seeding = Backends(dict(config))
    try:  # what ServedApp does at start: the sale is reloaded before any buyer comes
        demo.seed(sqlite_url, own_redis.url,
                  fence=functools.partial(locks.raise_fence, seeding, hold=False))
    finally:
        seeding.close()
    order = _buy_after_restart(sqlite_url, own_redis, redlock_urls)
    assert order["fencing_token"] > max(before), (before, order)


def test_a_fence_a_majority_cannot_take_leaves_buyers_busy_until_it_can(sqlite_url, own_redis,
                                                                       redlock_cluster):
    for server in redlock_cluster.servers:
        server.start()
    urls = redlock_cluster.urls
    before = _first_start(sqlite_url, own_redis, "redlock", urls)
    _restart_empty(own_redis, redlock_cluster)
    for server in redlock_cluster.servers[:3]:
        server.kill()  # the counter can be raised on 2 of 5 nodes only
    seeding = Backends(dict(make_app(sqlite_url, own_redis.url, REDLOCK_URLS=urls).config))
    try:
        demo.seed(sqlite_url, own_redis.url,  # the server still starts
                  fence=functools.partial(locks.raise_fence, seeding, hold=False))
    finally:
        seeding.close()
    app = make_app(sqlite_url, own_redis.url, REDLOCK_URLS=urls)
    try:
        response = buy(app.test_client(), "dee")
        assert response.status_code == 503, response.get_json()  # not sold on a low token
        assert response.get_json()["error"] == "busy"
    finally:
        backends(app).close()
    for server in redlock_cluster.servers[:3]:
        server.start()
    order = _buy_after_restart(sqlite_url, own_redis, urls)
    assert order["fencing_token"] > max(before), (before, order)


def test_a_crowd_finding_the_sale_gone_reloads_it_once_per_process(sqlite_url, own_redis):
    # each of them ran the fence's MAX over the sale's orders (~34 ms at 270,000 orders)
    from webapp.saleinfo import FENCE_SLACK, cached_sale

    before = _first_start(sqlite_url, own_redis, "token", [])
    _restart_empty(own_redis, None)
    app = make_app(sqlite_url, own_redis.url)
    b = backends(app)
    fenced: list[int] = []
    crowd = threading.Barrier(8)

    def buyer() -> None:
        crowd.wait()
        cached_sale(b.redis, b.sessions, "sku-1", fence=lambda sale, issued: fenced.append(issued))

    try:
        threads = [threading.Thread(target=buyer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        # one reload: its fence raised before its copy is written and again after
        assert fenced == [max(before) + FENCE_SLACK] * 2
    finally:
        b.close()


def test_tokens_handed_out_after_one_reload_stay_below_the_next_reloads_fence(
        database_url, own_redis, strategy):
    """The fence was the sale's highest order token plus ``FENCE_SLACK``, and nothing
    remembered it. Tokens handed out after a reload with no order to show them (a
    hold-off's 503s, refusals, sections still writing) were forgotten at the next
    loss: that reload computed the same fence again, and later orders carried tokens
    below, or equal to, ones already handed out (a fault audit: 2797 then 2398). The
    sale row keeps the fence it last raised (``sales.fence_floor``); the next one goes
    past it."""
    from webapp.saleinfo import cached_sale, load_sale

    name, cluster, redlock_urls = strategy
    before = _first_start(database_url, own_redis, name, redlock_urls)
    _restart_empty(own_redis, cluster)
    app = make_app(database_url, own_redis.url, REDLOCK_URLS=redlock_urls)
    b = backends(app)
    burned = []
    try:
        cached_sale(b.redis, b.sessions, "sku-1",  # the first reload raises the fence
                    fence=functools.partial(locks.raise_fence, b, hold=False))
        lock = locks._new_lock(b, load_sale(b.sessions, "sku-1"), "refused")
        for _ in range(50):  # sections that sold nothing: tokens no order shows
            assert lock.acquire(timeout=5)
            burned.append(lock.fencing_token)
            lock.release()
    finally:
        b.close()
    assert min(burned) > max(before), (before, burned)
    _restart_empty(own_redis, cluster)
    order = _buy_after_restart(database_url, own_redis, redlock_urls)
    assert order["fencing_token"] > max(burned), (before, burned, order)


def test_sections_that_sell_nothing_record_their_tokens_before_the_slack_runs_out(
        database_url, own_redis, strategy, monkeypatch):
    """Each refusal takes a lock token and writes no order: one buyer asking for 2 when
    1 was left used up the 100,000 slack in 4-5 minutes, and after a loss the tokens
    went backwards again (a fault audit). A section whose token runs more than half the
    slack past the recorded fence records it first. Here the slack is 100 and 200
    refusals run before Redis restarts."""
    from webapp import saleinfo
    from webapp.saleinfo import load_sale

    monkeypatch.setattr(saleinfo, "FENCE_SLACK", 100)
    name, cluster, redlock_urls = strategy
    before = _first_start(database_url, own_redis, name, redlock_urls)
    app = make_app(database_url, own_redis.url, REDLOCK_URLS=redlock_urls)
    b = backends(app)
    try:
        client = app.test_client()
        for n in range(200):
            refused = buy(client, f"greedy-{n}", quantity=50)  # 7 left: a section refuses
            assert refused.status_code == 409, refused.get_json()
        probe = locks._new_lock(b, load_sale(b.sessions, "sku-1"), "probe")
        assert probe.acquire(timeout=5)
        handed_out = probe.fencing_token  # the highest token so far: no order shows it
        probe.release()
    finally:
        b.close()
    assert handed_out is not None and handed_out > max(before) + 200, (before, handed_out)
    _restart_empty(own_redis, cluster)
    order = _buy_after_restart(database_url, own_redis, redlock_urls)
    assert order["fencing_token"] > handed_out, (before, handed_out, order)


def test_a_restart_between_the_fence_and_the_copy_does_not_lose_the_fence(sqlite_url,
                                                                          own_redis):
    """The reload raises the lock's counter, then writes the sale's copy. Redis
    restarting again between the two took the raised counter with it, while the copy
    went into the new, empty Redis: nothing reloaded again, and tokens started at 1
    (a fault audit: 16, then 12). The fence is raised again once the copy stands."""
    from webapp.saleinfo import cached_sale

    before = _first_start(sqlite_url, own_redis, "token", [])
    _restart_empty(own_redis, None)
    app = make_app(sqlite_url, own_redis.url)
    b = backends(app)
    raised: list[int] = []

    def fence_then_redis_restarts(sale: Any, issued: int) -> int | None:
        hold = locks.raise_fence(b, sale, issued, hold=False)
        if not raised:
            b.redis.flushall()  # the second restart: the raised counter is gone
        raised.append(issued)
        return hold

    try:
        cached_sale(b.redis, b.sessions, "sku-1", fence=fence_then_redis_restarts)
        response = buy(app.test_client(), "dee")
        assert response.status_code == 201, response.get_json()
        assert response.get_json()["fencing_token"] > max(before), (before, raised)
    finally:
        b.close()
