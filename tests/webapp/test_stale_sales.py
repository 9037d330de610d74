"""Redis holding an older sale than the database, and the writes that would sell it.

A review found three ways for it, each an oversold or stuck sale:

- a reset whose Redis side failed after its database side committed (503 to the
  admin, the orders already deleted): lock-path buyers went on selling the old Redis
  stock into the new sale (oversold 7 of 2), and a sold-out old sale answered 409 with
  the new sale's units unsold;
- the same Redis copy back from an old snapshot;
- a lock section's order write that outlived its lock while a reset took it: the row
  landed in the new sale (oversold 1).

Every test here fails on the code before the fix (``sales.reset_sale`` tries its Redis
side again; a lock section's rows are written only in its stock's generation,
``section.py``; a refused row drops the stale copy, ``saleinfo.forget_stale_copy``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_py
from flask import Flask

from tests.webapp.conftest import SKU, auth, backends, buy, empty_shop, make_app, reset
from webapp import orders, paths, saleinfo, sales, sectionorders
from webapp.keys import SaleKeys

pytestmark = pytest.mark.timeout(90)

LOCK_TTL_MS = 1_000  # a lock path's reload holds its sections off this long


@pytest.fixture(params=[True, False], ids=["combined", "plain"])
def shop(request: Any, database_url: str, redis_url: str) -> Iterator[Flask]:
    """A shop whose lock sections are combined (the default) or plain."""
    app = make_app(database_url, redis_url, LOCK_TTL_MS=LOCK_TTL_MS, LOCK_TIMEOUT_S=5.0,
                   LOCK_COMBINE=request.param)
    empty_shop(app)
    sales.create_product(backends(app).sessions, SKU, "Keyboard", 4_900, stock=10,
                         strategy="token")
    yield app
    backends(app).close()


def buy_until_answered(client: Any, user: str, within_s: float = 20.0) -> Any:
    """Buy, retrying 503 busy (a refused stale row, a reload's hold-off) as a buyer
    would: the final answer."""
    deadline = time.monotonic() + within_s
    while (response := buy(client, user)).status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    return response


def sell_to_five_and_audit(client: Any) -> dict[str, Any]:
    statuses = sorted(buy_until_answered(client, f"buyer-{i}").status_code for i in range(5))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert statuses == [201, 201, 409, 409, 409], (statuses, audit)
    return audit


def fail_reset_redis(monkeypatch: Any, strategy: str, times: int | None,
                     error: Exception | None = None) -> None:
    """The reset's Redis side fails ``times`` times (None: every time), after the
    database's side committed: Redis restarting between the two (or ``error``)."""
    cls = type(paths.path_for(strategy))
    real, failed = cls.reset_redis, []

    def reset_redis(*args: Any, **kwargs: Any) -> None:
        if times is None or len(failed) < times:
            failed.append(1)
            raise error or redis_py.ConnectionError("Redis restarted")
        real(*args, **kwargs)

    monkeypatch.setattr(cls, "reset_redis", reset_redis)


def a_reset_whose_redis_side_never_came(shop: Flask, monkeypatch: Any, strategy: str,
                                        error: Exception | None = None) -> tuple[Any, Any]:
    """A sale of 10 (ann bought one) reset to 2 over HTTP, its Redis side failing every
    try: its database side is done, Redis keeps the old sale. The client, the 503."""
    monkeypatch.setattr(sales, "REDIS_SIDE_TRIES_S", 0.3)
    client = shop.test_client()
    reset(client, stock=10, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    fail_reset_redis(monkeypatch, strategy, times=None, error=error)
    failed = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                        json={"stock": 2, "strategy": strategy})
    monkeypatch.undo()
    assert failed.status_code == 503, failed.get_json()
    return client, failed


@pytest.mark.parametrize("sold_out_before", [False, True], ids=["selling", "sold-out"])
@pytest.mark.parametrize("strategy", ["token", "fair", "atomic", "sql"])
def test_a_reset_whose_redis_side_failed_once_is_done_when_redis_is_back(
        shop, monkeypatch, strategy, sold_out_before):
    client = shop.test_client()
    reset(client, stock=1 if sold_out_before else 10, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    if sold_out_before:
        assert buy(client, "bob").status_code == 409  # and the sold-out flag is set
    fail_reset_redis(monkeypatch, strategy, times=2)
    reset(client, stock=2, strategy=strategy)  # 200: tried again
    monkeypatch.undo()
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["remaining"],
            audit["consistent"]) == (2, 2, 0, True), audit


@pytest.mark.parametrize("error", [
    None, redis_py.exceptions.OutOfMemoryError(
        "command not allowed when used memory > 'maxmemory'.")], ids=["down", "refused"])
@pytest.mark.parametrize("strategy", ["token", "fair", "atomic", "sql"])
def test_a_reset_whose_redis_side_never_came_says_so_and_the_old_sale_sells_nothing(
        shop, monkeypatch, strategy, error):
    # refused: out of memory, no permission, read-only; it said "redis is unavailable,
    # try again shortly", the database side done all the same (a Redis audit)
    client, failed = a_reset_whose_redis_side_never_came(shop, monkeypatch, strategy,
                                                         error)
    assert "reset in the database" in failed.get_json()["detail"]  # not "nothing done"
    # Redis still has the old sale (9 left): its first row is refused, its copy dropped
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["remaining"],
            audit["consistent"]) == (2, 2, 0, True), audit


def restore_keys(redis: Any, dumped: dict[str, bytes | None]) -> None:
    for key, value in dumped.items():
        if value is None:
            redis.delete(key)
        else:
            redis.restore(key, 0, value, replace=True)


@pytest.mark.parametrize("strategy", ["token", "atomic"])
def test_a_redis_back_from_an_old_snapshot_sells_the_new_sale_after_one_refusal(
        shop, strategy):
    """The old sale's keys come back after a reset (Redis restored from a snapshot taken
    before it): the database refuses the first row (another generation), the purchase
    drops the stale copy, and the next buyers load the new sale."""
    client, redis = shop.test_client(), backends(shop).redis
    reset(client, stock=10, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    keys = SaleKeys(SKU).all()
    snapshot = {key: redis.dump(key) for key in keys}
    reset(client, stock=2, strategy=strategy)
    restore_keys(redis, snapshot)  # stock 9 of the old generation, the old copy
    first = buy(client, "first")
    assert first.status_code == 503, first.get_json()  # its row refused: nothing sold
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["remaining"],
            audit["consistent"]) == (2, 2, 0, True), audit


def test_a_section_row_written_after_a_reset_took_the_expired_lock_stays_out(
        shop, monkeypatch):
    """The row's write waited past the lock's TTL (the database busy), and a reset took
    the lock meanwhile: here the reset runs inside the write, before its transaction."""
    client = shop.test_client()
    reset(client, stock=10, strategy="token")
    shop_backends = backends(shop)
    real_order, real_batch = orders.insert_order, sectionorders.insert_batch
    resets: list[int] = []

    def reset_first() -> None:
        if not resets:
            resets.append(1)
            sales.reset_sale(shop_backends.sessions, shop_backends.redis, SKU, stock=5,
                             strategy="token")

    def late_order(*args: Any, **kwargs: Any) -> Any:
        reset_first()
        return real_order(*args, **kwargs)

    def late_batch(*args: Any, **kwargs: Any) -> Any:
        reset_first()
        return real_batch(*args, **kwargs)

    monkeypatch.setattr(orders, "insert_order", late_order)
    monkeypatch.setattr(sectionorders, "insert_batch", late_batch)
    answer = buy(client, "ann")
    assert resets, "the purchase wrote no row"
    assert answer.status_code == 503, answer.get_json()
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["initial_stock"], audit["remaining"], audit["database_remaining"],
            audit["orders"], audit["consistent"]) == (5, 5, 5, 0, True), audit
    # and the new sale sells its five, no more
    statuses = [buy(client, f"buyer-{i}").status_code for i in range(7)]
    assert sorted(statuses) == [201] * 5 + [409] * 2, statuses


def test_a_keyed_retry_beside_its_purchase_in_flight_gets_that_order_not_sold_out(
        database_url, redis_url):
    """ann's purchase took the last unit and works; bob's refusal sets the sold-out
    flag; ann's client retries with the same Idempotency-Key. It heard 409 sold_out at
    once, and then held an order it was told it did not get."""
    app = make_app(database_url, redis_url)
    empty_shop(app)
    sales.create_product(backends(app).sessions, SKU, "Keyboard", 4_900, stock=1,
                         strategy="atomic")
    try:
        client = app.test_client()
        reset(client, stock=1, strategy="atomic", work_ms=1_500)
        first: list[Any] = []
        thread = threading.Thread(target=lambda: first.append(
            buy(app.test_client(), "ann", key="ann-key")))
        thread.start()
        redis = backends(app).redis
        deadline = time.monotonic() + 10
        while redis.get(SaleKeys(SKU).stock) != b"0" and time.monotonic() < deadline:
            time.sleep(0.02)  # ann has taken the unit and works
        assert buy(client, "bob").status_code == 409
        retry = buy(client, "ann", key="ann-key")
        thread.join(20)
        assert first[0].status_code == 201, first[0].get_json()
        assert retry.status_code == 200, retry.get_json()
        assert retry.get_json()["order_id"] == first[0].get_json()["order_id"]
    finally:
        backends(app).close()


def test_a_sqlite_writer_waits_for_the_file_less_than_half_a_lock_ttl(sqlite_url, redis_url):
    """SQLite's busy wait is in C (the whole gevent worker waits with it) and a lock
    section's order write waits inside the lock: at 20 s, a write outlived the 10 s lock,
    and purchases on a worker answered after 20-40 s, past the page's 35 s."""
    from sqlalchemy import text

    app = make_app(sqlite_url, redis_url)
    try:
        with backends(app).sessions() as session:
            busy_ms = session.execute(text("PRAGMA busy_timeout")).scalar_one()
        assert 0 < busy_ms <= app.config["LOCK_TTL_MS"] / 2, busy_ms
    finally:
        backends(app).close()


def leave_a_mark(redis: Any, ttl_ms: int) -> None:
    """A reset's in-flight mark that outlived it (``sales._in_flight``): its DELETE
    failed with the Redis that failed its Redis side, or its worker was killed."""
    redis.set(SaleKeys(SKU).reset_in_flight, 1, px=ttl_ms)


@pytest.mark.parametrize("strategy", ["token", "atomic"])
def test_a_mark_left_by_a_failed_reset_costs_its_ttl_not_the_sale(shop, monkeypatch,
                                                                  strategy):
    """A review of the mark's first form, which kept the stale copy while it lived:
    the old sale's buyers took its units, were refused, and once it was sold out every
    buyer heard 409 for good, the new sale's 2 units unsold. Now the copy goes as
    before, and a buyer who finds none waits out the mark (503s), then reloads."""
    client, _ = a_reset_whose_redis_side_never_came(shop, monkeypatch, strategy)
    leave_a_mark(backends(shop).redis, 2_000)
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["remaining"],
            audit["consistent"]) == (2, 2, 0, True), audit


def test_a_mark_left_by_a_failed_reset_does_not_hold_up_the_next_reset(shop):
    client, redis = shop.test_client(), backends(shop).redis
    reset(client, stock=10, strategy="token")
    redis.delete(SaleKeys(SKU).info)  # no copy, and a mark for 30 s
    leave_a_mark(redis, 30_000)
    started = time.monotonic()
    reset(client, stock=2, strategy="token")
    assert time.monotonic() - started < 2.0
    assert not redis.exists(SaleKeys(SKU).reset_in_flight)
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["consistent"]) == (
        2, 2, True), audit


def test_buyers_who_find_a_left_mark_hear_503_each_in_a_second_and_a_reset_goes_first(shop):
    """A second review: the wait for a reset's copy ran inside the process's one
    reload at a time, so with a mark left behind the buyers queued behind one another's
    waits (503s at 3, 6 and 9 s, the rest hanging for the mark's TTL), and so did the
    reset that would clear it. Each buyer now waits ``COPY_WAIT_S`` (1 s) at most."""
    client, redis = shop.test_client(), backends(shop).redis
    reset(client, stock=10, strategy="token")
    redis.delete(SaleKeys(SKU).info)
    leave_a_mark(redis, 15_000)
    took: dict[str, float] = {}
    answers: dict[str, Any] = {}

    def buyer(name: str) -> None:
        started = time.monotonic()
        answers[name] = buy(client, name).get_json()
        took[name] = time.monotonic() - started

    threads = [threading.Thread(target=buyer, args=(f"buyer-{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(answer["detail"] == f"the sale of {SKU} is being reset; try again"
               for answer in answers.values()), answers
    assert 0.8 < min(took.values()) and max(took.values()) < 3.0, took
    started = time.monotonic()
    reset(client, stock=2, strategy="token")  # not held up by the mark: it reloads
    assert time.monotonic() - started < 3.0
    audit = sell_to_five_and_audit(client)
    assert (audit["initial_stock"], audit["units_sold"], audit["consistent"]) == (
        2, 2, True), audit


def test_a_reset_between_a_reloads_check_and_its_read_is_not_reloaded_over(shop, monkeypatch):
    """A third review: inside the one-reload-at-a-time lock the mark was asked before
    the sale was read from the database; a reset that marked itself and committed
    between the two was reloaded over as if Redis had lost it (a lock strategy: a
    hold-off of one lock TTL). Asked after the read, it is a 503 "being reset"."""
    client, redis = shop.test_client(), backends(shop).redis
    reset(client, stock=10, strategy="token")
    redis.delete(SaleKeys(SKU).info)  # Redis lost the copy; no reset in flight yet
    real = saleinfo.load_sale

    def a_reset_commits_meanwhile(sessions: Any, sku: str) -> Any:
        leave_a_mark(redis, 5_000)  # the reset's mark, then its database side
        return real(sessions, sku)

    monkeypatch.setattr(saleinfo, "load_sale", a_reset_commits_meanwhile)
    answer = buy(client, "ann")
    monkeypatch.undo()
    assert answer.status_code == 503, answer.get_json()
    assert answer.get_json()["detail"] == f"the sale of {SKU} is being reset; try again"
    assert not redis.exists(SaleKeys(SKU).holdoff)  # nothing reloaded, nothing held off
    assert not redis.exists(SaleKeys(SKU).info)


@pytest.mark.parametrize(("strategy", "ahead"), [("token", "database-restored"),
                                                 ("atomic", "clock-ahead")])
def test_a_database_older_than_redis_is_mended_by_a_reset(shop, redis_client, request,
                                                          strategy, ahead):
    """The database restored from a backup older than Redis's keys (or a shop of another
    database writing to the same Redis): no reload can stand over a generation the
    database never had, and every purchase, audit and the admin's reset answered 503
    "being reset or reloaded" for good (a showdown audit). The reset writes a newer
    generation over it, and the sale sells again."""
    from webapp.models import Sale

    # a generation an hour ahead would stay in this Redis, which the tests after share
    request.addfinalizer(redis_client.flushall)
    client, shop_backends = shop.test_client(), backends(shop)
    reset(client, stock=10, strategy=strategy)
    assert buy(client, "ann").status_code == 201
    if ahead == "database-restored":
        with shop_backends.sessions.begin() as session:  # the backup, an hour older
            sale = session.query(Sale).filter_by(sku=SKU).one()
            sale.started_at = sale.started_at - timedelta(hours=1)
    else:  # a generation written by a shop whose clock runs an hour ahead: the reset
        # answered 200 and wrote nothing, its own generation below that one (a review)
        from webapp.models import utcnow

        shop_backends.redis.set(SaleKeys(SKU).stock_gen,
                                saleinfo.generation(utcnow() + timedelta(hours=1)))
    shop_backends.redis.delete(SaleKeys(SKU).info)  # and the copy gone
    stuck = buy(client, "bob")
    assert stuck.status_code == 503, stuck.get_json()
    mended = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                        json={"stock": 5, "strategy": strategy})
    assert mended.status_code == 200, mended.get_json()
    assert buy(client, "cy").status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["initial_stock"], audit["units_sold"], audit["remaining"],
            audit["consistent"]) == (5, 1, 4, True), audit
