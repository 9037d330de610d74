"""Flat combining (``webapp/combining.py``): one section serves a worker's queued buyers.

Real threads buy through the app against a real redis-server and SQLite. To make a
batch deterministic, a test holds the sale's lock itself, lets buyers queue behind
the combiner (which is blocked acquiring it), then lets go: the queued buyers are
served in one section (``allocation.py``), in arrival order. The last test runs two
real processes (``twoprocesses.py``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select

import lockcore
from tests.webapp.conftest import SKU, backends, empty_shop, lock_held_at_stock_writes, make_app
from tests.webapp.twoprocesses import sell_in_two_processes
from webapp import allocation, sales
from webapp.combining import CombinableLock
from webapp.locks import local_queue, stock_resource
from webapp.models import Order
from webapp.saleinfo import load_sale


def combining_shop(sqlite_url: str, redis_url: str, *, stock: int, strategy: str = "token",
                   limit: int = 1, work_ms: int = 0, timeout_s: float = 20.0, **config: Any):
    app = make_app(sqlite_url, redis_url, LOCK_COMBINE=True, LOCK_TIMEOUT_S=timeout_s,
                   **config)
    empty_shop(app)
    shop = backends(app)
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=stock, strategy=strategy)
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=stock, strategy=strategy,
                     work_ms=work_ms, limit=limit)
    return app


def post(app, user: str, quantity: int = 1) -> tuple[int, dict[str, Any]]:
    resp = app.test_client().post(f"/api/products/{SKU}/purchase",
                                  json={"user_id": user, "quantity": quantity})
    return resp.status_code, resp.get_json()


def orders_of(app) -> list[Order]:
    with backends(app).sessions() as session:
        return list(session.scalars(select(Order).where(Order.sku == SKU)))


def combiner_of(app, strategy: str = "token"):
    shop = backends(app)
    sale = dataclasses.replace(load_sale(shop.sessions, SKU), strategy=strategy)
    return shop.cohorts.combiner_for(local_queue(shop, sale), 64)



def queued_while_held(app, redis_client, buyers: list[Callable[[], Any]],
                      before_release: Callable[[], Any] = lambda: None, *,
                      strategy: str = "token", held: Any = None) -> list[Any]:
    """Hold the sale's lock (``held``: the token lock unless given), start ``buyers``
    one by one (each queued before the next starts), let go, and return their results
    in order."""
    combiner = combiner_of(app, strategy)
    if held is None:
        held = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=20_000)
    assert held.acquire(blocking=False)
    with ThreadPoolExecutor(len(buyers)) as pool:
        futures = []
        for n, buyer in enumerate(buyers, start=1):
            futures.append(pool.submit(buyer))
            while len(combiner._queue) < n:  # the first leads, blocked on our lock
                threading.Event().wait(0.001)
        before_release()
        held.release()
        return [future.result(20) for future in futures]


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_many_concurrent_buyers_get_exactly_the_stock_one_order_row_per_success(
        sqlite_url, redis_url, redis_client, strategy):
    app = combining_shop(sqlite_url, redis_url, stock=50, strategy=strategy, work_ms=1)
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda n: post(app, f"u{n}"), range(120)))
    statuses = [status for status, _ in answers]
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    rows = orders_of(app)
    assert statuses.count(201) == 50 and statuses.count(409) == 70, statuses
    assert {body["error"] for status, body in answers if status == 409} == {"sold_out"}
    assert len(rows) == len({row.user_id for row in rows}) == 50
    assert audit["consistent"] and audit["remaining"] == 0 and audit["units_sold"] == 50
    assert all(row.fencing_token is not None for row in rows)  # the holder's token
    combiner = combiner_of(app, strategy)
    assert combiner.served > combiner.batches  # some section served more than one buyer
    backends(app).close()


def test_a_batch_allocates_in_arrival_order_and_refuses_exactly_at_the_boundary(
        sqlite_url, redis_url, redis_client):
    app = combining_shop(sqlite_url, redis_url, stock=5, limit=3)
    wanted = [("a", 3), ("b", 3), ("c", 2), ("d", 1)]
    answers = queued_while_held(app, redis_client,
                                [lambda u=u, q=q: post(app, u, q) for u, q in wanted])
    assert [status for status, _ in answers] == [201, 409, 201, 409]
    assert answers[1][1] == {"error": "sold_out", "detail": f"only 2 left of {SKU}"}
    assert answers[3][1] == {"error": "sold_out", "detail": f"{SKU} is sold out"}
    assert combiner_of(app).batches == 1  # all four in one section
    assert {(row.user_id, row.quantity) for row in orders_of(app)} == {("a", 3), ("c", 2)}
    assert len({row.fencing_token for row in orders_of(app)}) == 1
    buyers = backends(app).redis.smembers(f"sale:{{{SKU}}}:buyers")
    assert buyers == {b"a", b"c"}  # the refused buyers' reservations were dropped
    backends(app).close()


def test_a_failed_order_row_in_a_batch_gives_its_units_back_before_the_lock_goes(
        sqlite_url, redis_url, redis_client):
    app = combining_shop(sqlite_url, redis_url, stock=10, limit=2)
    shop = backends(app)
    sale = load_sale(shop.sessions, SKU)
    with shop.sessions.begin() as session:  # "b" has a row but no reservation in Redis
        session.add(Order(sale_id=sale.id, sku=SKU, user_id="b", quantity=1, strategy="token"))
    answers = queued_while_held(app, redis_client,
                                [lambda u=u: post(app, u, 2) for u in ("a", "b", "c")])
    assert [status for status, _ in answers] == [201, 409, 201]
    assert answers[1][1]["error"] == "already_purchased"
    assert int(shop.redis.get(f"sale:{{{SKU}}}:stock")) == 10 - 4  # b's two units came back
    assert sorted(row.user_id for row in orders_of(app)) == ["a", "b", "c"]
    shop.close()


def test_a_combiner_killed_while_giving_units_back_leaves_each_written_buyer_its_order(
        sqlite_url, redis_url, redis_client, monkeypatch):
    from webapp import sectionorders

    class Killed(BaseException):  # what a killed greenlet raises where it yields
        pass

    def killed_give_back(*args, **kwargs):
        raise Killed

    def buy(user: str):
        try:
            return post(app, user, 2)
        except Killed:
            return "killed"

    app = combining_shop(sqlite_url, redis_url, stock=10, limit=2)
    shop = backends(app)
    sale = load_sale(shop.sessions, SKU)
    with shop.sessions.begin() as session:  # "b" has a row but no reservation in Redis
        session.add(Order(sale_id=sale.id, sku=SKU, user_id="b", quantity=1, strategy="token"))
    monkeypatch.setattr(sectionorders, "give_back", killed_give_back)  # b's units: killed
    answers = queued_while_held(app, redis_client, [lambda u=u: buy(u) for u in "abc"])
    assert answers[0] == "killed"  # the combiner, "a", stopped giving b's units back
    assert answers[1][0] == 409 and answers[1][1]["error"] == "already_purchased"
    assert answers[2][0] == 201, answers[2]  # c's row is written: c hears it
    assert sorted(row.user_id for row in orders_of(app)) == ["a", "b", "c"]
    assert not redis_client.exists(lockcore.create("token", redis_client, f"stock:{SKU}").key)
    shop.close()


def test_the_lock_is_held_until_every_winner_of_the_batch_has_written_its_row(
        sqlite_url, redis_url, redis_client, monkeypatch):
    from webapp import sectionorders

    app = combining_shop(sqlite_url, redis_url, stock=10)
    lock_key = lockcore.create("token", redis_client, f"stock:{SKU}").key
    held_while_writing: dict[str, bool] = {}
    real_insert = sectionorders.insert_batch

    def slow_insert(sessions, sale, batch, *rest):
        threading.Event().wait(0.2)  # a write late enough for a released lock to show
        for user_id, *_ in batch:
            held_while_writing[user_id] = bool(redis_client.exists(lock_key))
        return real_insert(sessions, sale, batch, *rest)

    monkeypatch.setattr(sectionorders, "insert_batch", slow_insert)
    answers = queued_while_held(app, redis_client,
                                [lambda u=u: post(app, u) for u in ("a", "b", "c")])
    assert [status for status, _ in answers] == [201, 201, 201]
    assert held_while_writing == {"a": True, "b": True, "c": True}
    assert not redis_client.exists(lock_key)  # and released after
    assert len(orders_of(app)) == 3
    backends(app).close()


def test_a_batch_with_simulated_work_is_cut_to_what_the_lock_ttl_has_room_for(
        sqlite_url, redis_url, redis_client, monkeypatch):
    """30 queued buyers at 20 ms of work each would hold one section 600 ms under a
    440 ms lock (LOCK_TTL_MS 400 + 2 x 20): the lock expires mid-section and another
    worker may take it. Batches are cut so every stock write happens under the lock."""
    app = combining_shop(sqlite_url, redis_url, stock=100, work_ms=20, LOCK_TTL_MS=400)
    held_at_write = lock_held_at_stock_writes(monkeypatch, redis_client, allocation)
    users = [f"u{n}" for n in range(30)]
    answers = queued_while_held(app, redis_client, [lambda u=u: post(app, u) for u in users])
    assert [status for status, _ in answers] == [201] * 30
    assert held_at_write and all(held_at_write), held_at_write  # never written unlocked
    assert combiner_of(app).batches >= 30 * 20 // 440, combiner_of(app).batches
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["consistent"] and audit["units_sold"] == 30, audit
    backends(app).close()


def test_a_lock_taken_for_the_sale_before_a_reset_is_not_kept_for_the_new_sales_work(
        sqlite_url, redis_url, redis_client, monkeypatch):
    """A reset raises work_ms on the same strategy: while it holds the lock, a buyer of
    the old sale waits for it and one of the new sale queues behind, in the same worker.
    The first took the lock with the old sale's TTL (LOCK_TTL_MS 1000 + 2 x 0), its
    section was over at once, and the young hold was kept for the next batch: the new
    sale's 1.5 s of work, under a lock that expired after 1 s. Another worker then took
    it and sold the same unit (an HTTP audit: 7 orders for 6 units, six runs of six)."""
    # a hold young enough to be kept however slow this machine is (250 ms: TTL / 4)
    app = combining_shop(sqlite_url, redis_url, stock=6, LOCK_TTL_MS=1_000,
                         LOCK_COHORT_MAX_MS=1_000)
    shop = backends(app)

    def queued() -> int:
        return sum(len(combiner._queue) for combiner in shop.cohorts._combiners.values())

    def until(count: int) -> None:
        while queued() < count:
            threading.Event().wait(0.001)

    held_at_write = lock_held_at_stock_writes(monkeypatch, redis_client, allocation)
    reset = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=20_000)
    assert reset.acquire(blocking=False)  # the admin reset's hold
    with ThreadPoolExecutor(2) as pool:
        old = pool.submit(post, app, "old")  # looked the old sale up: leads, waits
        until(1)
        sales.reset_sale(shop.sessions, shop.redis, SKU, stock=6, strategy="token",
                         work_ms=1_500, limit=1)  # what the reset does under the lock
        new = pool.submit(post, app, "new")
        until(2)
        reset.release()
        answers = [old.result(20), new.result(20)]
    assert answers[1][0] == 201, answers
    assert held_at_write and all(held_at_write), held_at_write  # never written unlocked
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["consistent"], audit
    shop.close()


def test_a_lock_without_a_ttl_cuts_a_batch_with_simulated_work_too(
        sqlite_url, redis_url, redis_client, zookeeper_hosts):
    """ZooKeeper's lock has no TTL, and the cap above skipped a lock without one: one
    section did every winner's work in turn, up to 256 x work_ms (a buyers audit: with
    work_ms 10 s, buyers had no answer for minutes and every admin reset was 503). It
    is cut as the TTL the shop gives its other locks would cut it."""
    app = combining_shop(sqlite_url, redis_url, stock=100, strategy="zookeeper",
                         work_ms=50, LOCK_TTL_MS=400, ZOOKEEPER_HOSTS=zookeeper_hosts)
    held = lockcore.create("zookeeper", zookeeper_hosts, stock_resource(SKU, "zookeeper"))
    users = [f"z{n}" for n in range(12)]
    answers = queued_while_held(app, redis_client, [lambda u=u: post(app, u) for u in users],
                                strategy="zookeeper", held=held)
    assert [status for status, _ in answers] == [201] * 12, answers
    # (400 + 2 x 50) // (4 x 50) = 2 buyers a batch: at least 6 batches, not 1
    assert combiner_of(app, "zookeeper").batches >= 6, combiner_of(app, "zookeeper").batches
    backends(app).close()


def test_a_database_failure_in_a_batch_is_503_for_its_winners_and_every_unit_comes_back(
        sqlite_url, redis_url, redis_client, monkeypatch):
    from sqlalchemy.exc import OperationalError

    from webapp import sectionorders

    def broken_insert(*args, **kwargs):
        raise OperationalError("INSERT INTO orders", {}, Exception("database is locked"))

    app = combining_shop(sqlite_url, redis_url, stock=3)
    monkeypatch.setattr(sectionorders, "insert_batch", broken_insert)
    answers = queued_while_held(app, redis_client,
                                [lambda u=u: post(app, u) for u in ("a", "b", "c", "d")])
    assert [(status, body["error"]) for status, body in answers] == \
        [(503, "busy")] * 3 + [(409, "sold_out")]
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (3, 0, True)
    monkeypatch.undo()
    assert post(app, "a")[0] == 201
    backends(app).close()


def test_a_buyer_not_served_in_time_hears_busy_and_leaves_the_queue(
        sqlite_url, redis_url, redis_client):
    app = combining_shop(sqlite_url, redis_url, stock=10, timeout_s=0.2)
    held = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=20_000)
    assert held.acquire(blocking=False)
    try:
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda u: post(app, u), ("a", "b", "c")))
    finally:
        held.release()
    assert [status for status, _ in answers] == [503, 503, 503]
    assert {body["error"] for _, body in answers} == {"busy"}
    combiner = combiner_of(app)
    assert not combiner._queue and not combiner._busy
    assert post(app, "a")[0] == 201  # the lead was given up: the next buyer combines
    backends(app).close()


def test_a_batch_whose_sale_was_reset_to_another_strategy_hears_busy_and_takes_nothing(
        sqlite_url, redis_url, redis_client):
    app = combining_shop(sqlite_url, redis_url, stock=10)
    shop = backends(app)
    answers = queued_while_held(  # they looked the sale up before the reset's write
        app, redis_client, [lambda u=u: post(app, u) for u in ("a", "b")],
        before_release=lambda: shop.redis.hset(f"sale:{{{SKU}}}:info", "strategy", "fair"))
    assert [body["error"] for _, body in answers] == ["busy", "busy"]
    assert int(shop.redis.get(f"sale:{{{SKU}}}:stock")) == 10 and orders_of(app) == []
    assert not shop.redis.smembers(f"sale:{{{SKU}}}:buyers")
    shop.close()


@pytest.mark.parametrize("strategy, combined", [
    ("token", True), ("fair", True), ("redlock", True),
    ("multi", False), ("naive", False), ("setnx", False), ("local", False),
])
def test_only_safe_single_resource_locks_combine_and_only_when_switched_on(
        sqlite_url, redis_url, redlock_cluster, strategy, combined):
    from webapp import locks
    from webapp.saleinfo import SaleInfo

    sale = SaleInfo(1, SKU, strategy, 0, 1, 10)
    for switch in (True, False):
        app = make_app(sqlite_url, redis_url, LOCK_COMBINE=switch,
                       REDLOCK_URLS=redlock_cluster.urls)
        lock = locks.lock_for(backends(app), sale, "ann")
        assert isinstance(lock, CombinableLock) is (switch and combined), (strategy, switch)
        backends(app).close()


# -- two real processes, one redis-server, one SQLite file ---------------------------
BUYERS_PER_PROCESS, STOCK = 40, 100  # two units each: neither process alone sells out


def _sell_in_a_process(database_url: str, redis_url: str, strategy: str, name: str,
                       ready: Callable[[], None]) -> tuple[Any, ...]:
    app = make_app(database_url, redis_url, LOCK_COMBINE=True, LOCK_TIMEOUT_S=20.0)
    ready()
    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda n: post(app, f"{name}-{n}", 2)[0],
                                 range(BUYERS_PER_PROCESS)))
    combiner = combiner_of(app, strategy)
    backends(app).close()
    return name, statuses, combiner.batches, combiner.served


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_two_worker_processes_combining_sell_exactly_the_stock_and_both_sell(
        sqlite_url, redis_url, redis_client, strategy):
    app = combining_shop(sqlite_url, redis_url, stock=STOCK, strategy=strategy, limit=2,
                         work_ms=2)  # work inside the section widens a broken exclusion
    got = sell_in_two_processes(_sell_in_a_process, sqlite_url, redis_url, strategy,
                                together=True)
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    backends(app).close()
    sold = {name: statuses.count(201) for name, statuses, _, _ in got}
    assert all(set(statuses) <= {201, 409} for _, statuses, _, _ in got), got
    assert 2 * sum(sold.values()) == audit["units_sold"] == STOCK, (sold, audit)
    assert audit["consistent"] and audit["oversold"] == 0, audit
    assert min(sold.values()) > 0, sold
    assert sum(served for *_, served in got) > sum(batches for *_, batches, _ in got)


def test_a_buyer_whose_wait_runs_out_inside_its_batch_hears_its_order(sqlite_url, redis_url,
                                                                      redis_client):
    # a buyer taken into a batch left the queue anyway when its wait ran out (500, though
    # the combiner wrote its row; its retry heard 409 already_purchased)
    # each winner works 600 ms in the section: a batch of two takes 1.2 s, longer than
    # the second buyer's 1.0 s wait
    app = combining_shop(sqlite_url, redis_url, stock=5, work_ms=600, timeout_s=1.0)
    held = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=10_000)
    assert held.acquire(blocking=False)  # so both buyers queue before the lead gets it
    answers: dict[str, tuple[int, dict]] = {}
    threads = [threading.Thread(target=lambda u=u: answers.__setitem__(u, post(app, u)))
               for u in ("lead", "second")]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    time.sleep(0.1)
    held.release()  # the lead takes the lock and serves [lead, second] in one batch
    for thread in threads:
        thread.join(10)
    users = sorted(order.user_id for order in orders_of(app))
    assert users == ["lead", "second"]  # both rows written in the batch
    assert answers["second"][0] == 201, answers["second"]  # so its answer is its order
    assert answers["lead"][0] == 201, answers["lead"]
    backends(app).close()


def test_a_buyer_handed_the_lead_as_its_wait_runs_out_leads(monkeypatch):
    """A queued buyer whose timed wait runs out just as it is handed the lead must take
    it: left, nobody led, ``_busy`` stayed True, and that worker's buyers of the item
    heard 503 for good (``combining.py``'s "check under the mutex" timeline; a
    mutation audit)."""
    from types import SimpleNamespace

    from tests.webapp.racing import WaitTimesOutAtTheHandOver
    from webapp import combining

    class RacingBuyer(combining.Buyer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.woken = WaitTimesOutAtTheHandOver()  # type: ignore[assignment]

    class RefusingLock:
        name, strategy, lost = "stock:sku-1", "token", False

        def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
            return False

        def release(self) -> None:
            pass

    monkeypatch.setattr(combining, "Buyer", RacingBuyer)
    combiner = combining.Combiner(8)
    combiner._busy = True  # another buyer combines
    deps = SimpleNamespace(monotonic=time.monotonic, lock_timeout_s=0.1)
    handle = combining.CombinableLock(RefusingLock(), combiner)
    errors: list[BaseException] = []

    def buy() -> None:
        try:
            combiner.purchase(deps, SimpleNamespace(sku="sku-1", work_ms=0),
                              SimpleNamespace(user_id="ann", quantity=1), handle)
        except BaseException as exc:  # noqa: BLE001 - the refusing lock's 503
            errors.append(exc)

    thread = threading.Thread(target=buy)
    thread.start()
    while not combiner._queue:
        time.sleep(0.001)
    with combiner._mutex:
        combiner._pass_lead()  # the other combiner is done: this buyer leads
    thread.join(5)
    assert len(errors) == 1  # it led, and the lock refused it: busy
    assert not combiner._busy and not combiner._queue  # nobody left waiting for a lead


def test_a_batch_that_sold_out_an_old_sale_leaves_the_new_sale_unflagged(
        sqlite_url, redis_url, redis_client, monkeypatch):
    """A batch's rows are written after its stock, and its lock may run out meanwhile
    (a busy database): a reset took the lock and started a new sale before the batch,
    which had sold the old one's last unit, set the sold-out flag. The rows are refused
    (another generation); the flag, a plain SET, landed on the new sale: 409 sold_out
    to every buyer of its 5 units, until the next reset (a review)."""
    from webapp import sectionorders

    app = combining_shop(sqlite_url, redis_url, stock=1)
    shop = backends(app)
    real_batch = sectionorders.insert_batch

    def reset_first(*args: Any, **kwargs: Any) -> Any:  # the lock ran out: a reset came
        sales.reset_sale(shop.sessions, shop.redis, SKU, stock=5, strategy="token")
        return real_batch(*args, **kwargs)

    monkeypatch.setattr(sectionorders, "insert_batch", reset_first)
    answers = queued_while_held(app, redis_client, [lambda: post(app, "a"),
                                                    lambda: post(app, "b")])
    assert [status for status, _ in answers] == [503, 409], answers
    monkeypatch.setattr(sectionorders, "insert_batch", real_batch)
    assert post(app, "c")[0] == 201
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (4, 1, True), audit


def test_a_batch_whose_lock_ran_out_leaves_no_sold_out_flag_over_its_deferred_unit(
        sqlite_url, redis_url, redis_client, monkeypatch):
    """The batch sold the last unit to a and refused b at zero; a's row failed after
    the lock had run out, so its unit goes back later, under the lock. Counted as sold,
    it let the batch set the sold-out flag, and when the give-back had been settled
    before that (another greenlet of the worker; without cohorts the settle takes the
    distributed lock, free by then) the flag stood over the unit: 409 to every buyer,
    until the next reset (a review)."""
    from sqlalchemy.exc import OperationalError

    from webapp import orders, sectionorders

    app = combining_shop(sqlite_url, redis_url, stock=1, LOCK_COHORT=False)
    lock_key = lockcore.create("token", redis_client, f"stock:{SKU}").key

    def expired_then_failed(*args: Any, **kwargs: Any) -> Any:
        redis_client.delete(lock_key)  # the lock ran out while the write waited
        raise OperationalError("INSERT INTO orders", {}, Exception("stalled"))

    real_flag = allocation.flag_sold_out

    def settled_first(*args: Any, **kwargs: Any) -> None:
        orders.IN_DOUBT.drain()  # the worker's drain, just before the batch's flag
        real_flag(*args, **kwargs)

    monkeypatch.setattr(sectionorders, "insert_batch", expired_then_failed)
    monkeypatch.setattr(allocation, "flag_sold_out", settled_first)
    answers = queued_while_held(app, redis_client, [lambda: post(app, "a"),
                                                    lambda: post(app, "b")])
    assert [status for status, _ in answers] == [503, 409], answers
    monkeypatch.undo()
    assert post(app, "c")[0] == 201  # its drain gives a's unit back first, if needed
    audit = app.test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (0, 1, True), audit
