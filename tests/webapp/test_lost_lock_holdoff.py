"""Redis restarts empty while a lock holder is in its section: the lock is gone, and the
stock reloaded from the database misses that holder's order, not written yet. The
reload holds the sale's sections off for one lock TTL, and the first section after it
reads the stock from the database (``section.py``)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.webapp.conftest import SKU, backends, buy, empty_shop, make_app, reset
from webapp import allocation, lockedpath, sales

pytestmark = pytest.mark.timeout(60)

LOCK_TTL_MS = 1_000
WORK_MS = 600  # the lock lives LOCK_TTL_MS + 2 x WORK_MS = 2.2 s


@pytest.fixture
def shop(sqlite_url: str, redis_url: str, redis_client: Any) -> Iterator[Flask]:
    app = make_app(sqlite_url, redis_url, LOCK_TTL_MS=LOCK_TTL_MS, LOCK_TIMEOUT_S=5.0)
    empty_shop(app)
    sales.create_product(backends(app).sessions, SKU, "Keyboard", 4_900, stock=10,
                         strategy="token")
    yield app
    backends(app).close()


def _restart_while_a_holder_works(shop: Flask, redis_client: Any, strategy: str,
                                  ) -> tuple[threading.Thread, list[Any]]:
    """Buyer "before" in its lock section (it has read 10 units and works) when Redis
    restarts empty: its thread, and the list its answer goes into."""
    reset(shop.test_client(), stock=10, strategy=strategy, work_ms=WORK_MS)
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(buy(shop.test_client(), "before")))
    holder.start()
    time.sleep(0.25)  # "before" holds the lock, has read 10 and works
    redis_client.flushall()  # our own server: the restart without persistence
    return holder, first


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_holder_from_before_the_restart_is_waited_out(shop, redis_client, strategy):
    client = shop.test_client()
    holder, first = _restart_while_a_holder_works(shop, redis_client, strategy)
    during = buy(client, "during")  # reloads the sale and finds the lock free
    assert during.status_code == 503, during.get_json()
    # the hold-off's rest (2.2 s lock TTL), not 1 s: a page retried every second for 10 s
    assert int(during.headers["Retry-After"]) >= 2, during.headers
    holder.join(10)
    assert first[0].status_code == 201, first[0].get_json()
    after_the_holdoff_the_books_balance(client)


@pytest.mark.parametrize("strategy, held_off", [("token", True), ("fair", True),
                                                ("multi", True), ("local", False)])
def test_only_a_lock_that_lived_in_the_lost_redis_holds_the_sale_off(shop, redis_client,
                                                                       strategy, held_off):
    # RedLock's nodes, ZooKeeper or the process still hold their lock: no hold-off,
    # only the stock read again from the database by the first section
    from webapp import locks
    from webapp.keys import SaleKeys
    from webapp.saleinfo import cached_sale

    reset(shop.test_client(), stock=10, strategy=strategy)
    redis_client.flushall()
    shop_backends = backends(shop)
    cached_sale(shop_backends.redis, shop_backends.sessions, SKU,
                fence=functools.partial(locks.raise_fence, shop_backends))
    keys = SaleKeys(SKU)
    assert redis_client.exists(keys.reloaded) == 1
    assert redis_client.exists(keys.holdoff) == int(held_off)


@pytest.mark.parametrize("strategy", ["token", "multi"])
def test_a_reset_right_after_the_restart_waits_out_a_holder_from_before(shop, redis_client,
                                                                        strategy):
    """A reset before any buyer reloaded the sale took the lock at once in the empty
    Redis; the holder from before then wrote the old stock minus one over the new
    stock, and its order into the new sale: oversold by the old stock (a fault audit)."""
    client = shop.test_client()
    holder, first = _restart_while_a_holder_works(shop, redis_client, strategy)
    started = time.monotonic()
    reset(client, stock=3, strategy=strategy)  # waits for "before" to be done first
    waited = time.monotonic() - started
    holder.join(10)
    assert first[0].status_code == 201, first[0].get_json()  # in the old sale
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["initial_stock"], audit["orders"], audit["remaining"],
            audit["consistent"]) == (3, 0, 3, True), audit
    assert waited > WORK_MS / 1000, waited
    for buyer in ("a", "b", "c", "d"):
        buy(client, buyer)
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["units_sold"], audit["remaining"], audit["consistent"]) == (3, 0, True), audit


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_row_written_after_the_reload_is_counted_by_the_first_section_after_the_holdoff(
        shop, redis_client, monkeypatch, strategy):
    # the restart comes after the holder's SET, while its row is written: the reload
    # reads 10 from the database, and only the re-read after the hold-off sees the row
    client = shop.test_client()
    reset(client, stock=10, strategy=strategy)
    writing, go_on, holder, first = _holder_paused_before_its_row(shop, monkeypatch)
    assert writing.wait(10)
    redis_client.flushall()  # the restart without persistence, mid-write
    during = buy(client, "during")  # reloads: the database still says 10
    assert during.status_code == 503, during.get_json()
    go_on.set()
    holder.join(10)
    assert first[0].status_code == 201, first[0].get_json()
    after_the_holdoff_the_books_balance(client)


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_row_written_after_the_first_count_is_refused(shop, sqlite_url, redis_url,
                                                        redis_client, monkeypatch, strategy):
    """The holder's write outlives the hold-off (its database stalled): the first
    section's count, without its row, sold its unit again (a fault audit: SQLite's write
    lock held 4.5 s after a restart, 1 and 5 oversold). The count starts a new
    generation in the database; a row after it is refused, as after a reset."""
    client = shop.test_client()
    reset(client, stock=10, strategy=strategy)
    writing, go_on, holder, first = _holder_paused_before_its_row(shop, monkeypatch)
    assert writing.wait(10)
    redis_client.flushall()  # the restart without persistence, mid-write
    other = make_app(sqlite_url, redis_url, LOCK_TTL_MS=LOCK_TTL_MS, LOCK_TIMEOUT_S=5.0)
    try:  # another worker: in "before"'s, "after" would queue behind its batch
        deadline = time.monotonic() + 10
        while (after := buy(other.test_client(), "after")).status_code == 503:  # hold-off
            assert time.monotonic() < deadline, after.get_json()
            time.sleep(0.2)
        assert after.status_code == 201, after.get_json()  # counted without "before"'s row
    finally:
        go_on.set()
        backends(other).close()
    holder.join(10)
    assert first[0].status_code == 503, first[0].get_json()  # refused: nothing bought
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (1, 9, True), audit


def _holder_paused_before_its_row(shop: Flask, monkeypatch: Any) -> tuple[Any, ...]:
    """Buyer "before" in its lock section, its stock SET and its row's write paused:
    the events (its write reached, let it go on), its thread and its answer's list."""
    writing, go_on = threading.Event(), threading.Event()

    def paused(real):
        def write(*args, **kwargs):
            if threading.current_thread().name == "before":
                writing.set()  # stock already SET to 9 in Redis; the row not yet written
                assert go_on.wait(10)
            return real(*args, **kwargs)
        return write

    monkeypatch.setattr(allocation, "write_batch", paused(allocation.write_batch))
    monkeypatch.setattr(lockedpath, "record_order", paused(lockedpath.record_order))
    first: list = []
    holder = threading.Thread(target=lambda: first.append(buy(shop.test_client(), "before")),
                              name="before")
    holder.start()
    return writing, go_on, holder, first


def after_the_holdoff_the_books_balance(client: Any, orders: int = 2) -> None:
    """A buyer retrying through the hold-off gets the 10-unit sale's unit number
    ``orders`` (the second: "before"'s is the first): that many orders, consistent."""
    deadline = time.monotonic() + 10
    while (after := buy(client, "after")).status_code == 503:  # the hold-off
        assert time.monotonic() < deadline, after.get_json()
        time.sleep(0.2)
    assert after.status_code == 201, after.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) \
        == (orders, 10 - orders, True), audit


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_buyer_who_looked_the_sale_up_before_the_first_count_buys_after_it(
        shop, redis_client, strategy):
    """The count after the hold-off starts a new generation of the same sale (a reload's:
    one microsecond on, the reset's millisecond kept). Buyers who looked the sale up
    before it, queued behind the counting section, heard 503 "the sale ... was reset
    since this purchase looked it up", though nobody reset it (a deployment audit: 32-47
    of the 60 buyers of the first wave after a restart). The count changes no term of
    the sale: they buy in it."""
    from webapp import section
    from webapp.saleinfo import load_sale
    from webapp.services import Checkout

    client = shop.test_client()
    reset(client, stock=10, strategy=strategy)
    redis_client.flushall()  # our own server: the restart without persistence
    shop_backends = backends(shop)
    looked_up = load_sale(shop_backends.sessions, SKU)
    after_the_holdoff_the_books_balance(client, orders=1)  # the count: g0 -> g0'
    counted = load_sale(shop_backends.sessions, SKU)
    assert counted.generation != looked_up.generation  # the count's generation
    deps = Checkout(sessions=shop_backends.sessions, redis=shop_backends.redis,
                    lock_for=lambda s, u: None, sleep=lambda seconds: None)
    stock, generation = section.stock_if_still(deps, looked_up)  # no Busy
    assert (stock, generation) == (9, counted.generation)

