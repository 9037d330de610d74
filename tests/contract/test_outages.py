"""Redis going away under the served shop (its own redis-server, which this module
stops, pauses and restarts): purchases are 503 ``busy`` with ``Retry-After``, never
a 500; ``/healthz`` is 503 naming ``redis``; the shop recovers when Redis is back.
The same shop has a short lock timeout, so a buyer stuck behind a slow holder hears
503 ``busy`` too."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import lockcore
from tests.contract.shop import Shop, redis_of, served_shop
from tests.contract.wire import Answer, assert_error
from webapp.locks import stock_resource

SKU, SLOW = "qa-outage-1", "qa-outage-2"
LOCK_TIMEOUT_S = 2
#: the shop's wait for a Redis reply before 503 (10 s by default)
REPLY_TIMEOUT_S = 2
#: the shop's lock TTL (10 s by default): after Redis lost its data, a lock path's sale
#: holds its sections off this long (webapp/section.py)
LOCK_TTL_MS = 1_500


@pytest.fixture(scope="module")
def own_shop() -> Iterator[Shop]:
    with served_shop([SKU, SLOW], LOCK_TIMEOUT_S=str(LOCK_TIMEOUT_S),
                     REDIS_SOCKET_TIMEOUT_S=str(REPLY_TIMEOUT_S),
                     LOCK_TTL_MS=str(LOCK_TTL_MS)) as shop:
        yield shop


@pytest.fixture
def shop(own_shop: Shop) -> Iterator[Shop]:
    own_shop.redis_server.start()  # a no-op if it is running
    yield own_shop
    own_shop.redis_server.resume()
    own_shop.redis_server.start()


def wait_healthy(shop: Shop, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while shop.call("GET", "/healthz").status != 200:
        assert time.monotonic() < deadline, "the shop did not recover"
        time.sleep(0.2)


def buy_after_holdoff(shop: Shop, user: str, sku: str, timeout: float = 15.0) -> Answer:
    """Buy, retrying the 503s of the hold-off a lock path's sale starts after Redis lost
    its data (a holder from before may still be in its section: one lock TTL)."""
    deadline = time.monotonic() + timeout
    while (answer := shop.buy(user, sku)).status == 503 and time.monotonic() < deadline:
        assert "Redis restarted" in answer.json["detail"], answer.body
        time.sleep(0.2)
    return answer


def test_healthz_is_200_with_every_part_ok(shop):
    answer = shop.call("GET", "/healthz")
    assert answer.status == 200
    assert answer.json == {"redis": "ok", "database": "ok"}


def test_with_redis_stopped_purchases_are_503_busy_and_healthz_names_redis(shop):
    shop.reset(SKU, 5)
    shop.redis_server.stop()
    for n in range(6):  # every worker and pooled connection finds out
        assert_error(shop.buy(f"down-{n}", SKU), 503, "busy")
    health = shop.call("GET", "/healthz")
    body = assert_error(health, 503)
    assert body["redis"] != "ok" and body["database"] == "ok"
    assert "redis" in body["detail"]
    assert shop.call("GET", f"/api/products/{SKU}").status == 200  # the database's count
    assert shop.call("GET", "/api/products").status == 200
    assert_error(shop.call("GET", f"/api/sales/{SKU}/audit"), 503, "busy")


def test_a_503_from_healthz_says_when_to_retry(shop):
    shop.redis_server.stop()
    health = shop.call("GET", "/healthz")
    assert_error(health, 503)
    assert int(health.headers.get("retry-after", "-1")) >= 0, health.headers


def test_with_redis_paused_healthz_answers_503_within_a_few_seconds(shop):
    shop.redis_server.pause()
    started = time.monotonic()
    health = shop.call("GET", "/healthz", timeout=30)
    elapsed = time.monotonic() - started
    shop.redis_server.resume()
    assert_error(health, 503)
    # a load balancer's health probe gives up after a few seconds: a generous bound
    assert elapsed < 5.0, f"/healthz took {elapsed:.1f}s with Redis paused"


def test_with_redis_paused_the_product_list_waits_one_reply_timeout_not_one_per_product(
        shop):
    shop.reset(SKU, 10, "token")
    assert shop.buy("before-pause", SKU).status == 201
    shop.redis_server.pause()
    try:
        started = time.monotonic()
        listed = shop.call("GET", "/api/products", timeout=60)
        elapsed = time.monotonic() - started
    finally:
        shop.redis_server.resume()
    assert listed.status == 200, listed.body
    products = listed.json
    assert len(products) >= 5  # the demo's three and this module's two
    ours = next(p for p in products if p["sku"] == SKU)
    assert ours["stock"] == 9  # the database's count
    # it waited REPLY_TIMEOUT_S for each product in turn: 5 x 2 s
    assert elapsed < 2 * REPLY_TIMEOUT_S, f"took {elapsed:.1f}s"


def test_buyers_during_a_redis_restart_get_answers_never_500s(shop):
    shop.reset(SKU, 1_000, "token")
    stop = threading.Event()
    counts: Counter[int] = Counter()

    def buyer(worker: int) -> None:
        n = 0
        while not stop.is_set() and n < 200:
            answer = shop.buy(f"restart-{worker}-{n}", SKU)
            counts[answer.status] += 1
            if answer.status != 201:
                assert_error(answer, answer.status)
            n += 1

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(buyer, worker) for worker in range(4)]
        time.sleep(0.5)
        shop.redis_server.stop()
        time.sleep(1.0)
        shop.redis_server.start()
        time.sleep(1.0)
        stop.set()
        for future in futures:
            future.result()
    assert set(counts) <= {201, 409, 503}, counts
    assert counts[503] > 0, counts  # the outage was seen
    wait_healthy(shop)
    answer = shop.buy("right-after-restart", SKU)  # whatever it says, it is no 500
    if answer.status != 201:
        assert answer.status in (409, 503)
        assert_error(answer, answer.status)
    shop.reset(SKU, 10, "token")  # after data loss the admin restocks: then all is well
    assert shop.buy("after-restart", SKU).status == 201
    shop.assert_books_balance(SKU)


@pytest.mark.parametrize("strategy", ["token", "atomic", "atomic-sharded", "sql"])
def test_after_redis_loses_its_data_the_sale_goes_on_from_the_database(shop, strategy):
    # redis-server here keeps nothing on disk, like a cache restarted after a crash:
    # the stock key is gone, while the database still knows what is left
    shop.reset(SKU, 10, strategy)
    assert shop.buy("before-loss", SKU).status == 201
    shop.redis_server.restart()
    wait_healthy(shop)
    answer = buy_after_holdoff(shop, "after-loss", SKU)
    assert answer.status == 201, answer.body
    assert_error(shop.buy("before-loss", SKU), 409, "already_purchased")
    audit = shop.assert_books_balance(SKU)
    assert (audit["orders"], audit["remaining"]) == (2, 8)


@pytest.mark.parametrize("strategy", ["token", "atomic", "atomic-sharded", "sql"])
def test_after_redis_loses_its_data_an_earlier_buyer_still_hears_already_purchased(
        shop, strategy):
    # the one-order-per-user fast path (the buyers set) went with the data: once the
    # sale sells out, only that set tells an earlier buyer from a new one
    shop.reset(SKU, 2, strategy)
    assert shop.buy("early", SKU).status == 201
    shop.redis_server.restart()
    wait_healthy(shop)
    assert buy_after_holdoff(shop, "late", SKU).status == 201  # the last unit: sold out
    assert_error(shop.buy("early", SKU), 409, "already_purchased")
    assert_error(shop.buy("newcomer", SKU), 409, "sold_out")
    shop.assert_books_balance(SKU)


@pytest.mark.parametrize("strategy", ["atomic", "token", "sql"])
def test_a_purchase_cut_off_by_a_paused_redis_changes_nothing(shop, strategy):
    """Redis stalls past the shop's reply timeout: the buyer hears 503 busy, "try
    again". Redis runs the purchase's script when it wakes, after the shop gave up on
    it; it must change nothing, or the buyer is reserved without an order (the retry
    hears 409 already_purchased) and an atomic sale loses a unit for good: seed 001's
    lost reply, on the shop's own writes (webapp/deadlines.py)."""
    shop.reset(SKU, 10, strategy)
    shop.redis_server.pause()
    try:
        stalled = shop.buy("stalled", SKU)
    finally:
        shop.redis_server.resume()
    assert_error(stalled, 503, "busy")
    wait_healthy(shop)
    retry = shop.buy("stalled", SKU)
    assert retry.status == 201, retry.body
    audit = shop.audit(SKU)
    assert audit["orders"] == 1 and audit["remaining"] == 9 and audit["consistent"], audit


def test_a_buyer_kept_waiting_past_the_lock_timeout_hears_busy(shop):
    # Someone else (a stuck holder, a long reset) holds the sale's lock for longer than
    # the shop waits (LOCK_TIMEOUT_S): every buyer, in whichever worker, hears 503 busy.
    # (Five buyers queueing behind 1 s sections used to stand in for the holder, but
    # with flat combining one worker serves all of its queued buyers in one section:
    # only those of the other worker timed out, and all five could land in one.)
    shop.reset(SLOW, 10, "token")
    holder = lockcore.create("token", redis_of(shop), stock_resource(SLOW, "token"),
                             ttl_ms=30_000)
    assert holder.acquire(blocking=False)
    try:
        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda n: shop.buy(f"patient-{n}", SLOW), range(5)))
    finally:
        holder.release()
    assert [answer.status for answer in answers] == [503] * 5
    for answer in answers:
        assert_error(answer, 503, "busy")
    assert shop.buy("patient-0", SLOW).status == 201  # nothing was kept reserved
    audit = shop.assert_books_balance(SLOW)
    assert (audit["orders"], audit["remaining"]) == (1, 9)


@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_a_buyer_whose_lock_comes_after_redis_lost_its_data_does_not_end_the_sale(
        shop, strategy):
    # A buyer waits for the lock; Redis loses everything (the lock with it, so the
    # buyer gets in); its section finds no stock key. Read as 0 it set the sold-out
    # flag: every later buyer heard 409 sold_out with 9 units unsold, for good.
    shop.reset(SKU, 10, strategy)
    client = redis_of(shop)
    resource = stock_resource(SKU, strategy)
    holder = lockcore.create(strategy, client, [resource] if strategy == "multi" else resource,
                             ttl_ms=30_000)
    assert holder.acquire(blocking=False)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(shop.buy, "waiting", SKU)
        time.sleep(0.5)  # it is reserved and queued for the lock
        client.flushall()  # our own server: the shop's sale, its lock and our hold go
        answer = waiting.result(timeout=20)
    assert answer.status in (201, 503), answer.body  # never a sold-out with stock left
    after = buy_after_holdoff(shop, "after-loss", SKU)
    assert after.status == 201, after.body
    audit = shop.assert_books_balance(SKU)
    assert audit["remaining"] == 10 - audit["units_sold"] > 0
    client.close()


def test_after_redis_loses_its_data_the_audit_and_the_product_page_reload_it(shop):
    shop.reset(SKU, 7, "token")
    assert shop.buy("before-idle-loss", SKU).status == 201
    client = redis_of(shop)
    client.flushall()  # nobody buys after: the first reader must not see 0 left
    assert shop.call("GET", f"/api/products/{SKU}").json["stock"] == 6
    audit = shop.assert_books_balance(SKU)
    assert (audit["remaining"], audit["database_remaining"]) == (6, 6)
    client.close()
