"""Resets amid a crowd on the lock-free ``sql`` strategy (found by the contract sweep).

The database is the ``sql`` sale's stock; Redis holds a copy for the storefront, the
sold-out flag and the audit. A reset commits the database, then rewrites Redis. The
buyers whose conditional UPDATE commits just after the reset's commit (in SQLite they
queue behind it) used to send their ``DECRBY`` before the reset rewrote Redis: the
decrement was lost and the audit said ``consistent: false`` for good (Redis 212 units,
the database 181, in one run of 1500 buyers and 8 resets; every run failed).
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from tests.contract.test_concurrency import crowd

SKU = "qa-sweep-1"


@pytest.mark.parametrize("round_", range(2))
def test_resets_amid_a_crowd_on_sql_leave_redis_and_the_database_in_step(shop, round_):
    shop.reset(SKU, 300, "sql")
    calls = [lambda n=n: shop.buy(f"sql-amid-{round_}-{n}", SKU) for n in range(400)]
    for at in (60, 120, 180, 240, 300):
        calls.insert(at, lambda: shop.reset(SKU, 300, "sql"))
    for answer in crowd(calls, threads=64):
        assert answer.status in (200, 201, 409, 503), answer.body
    time.sleep(0.5)  # nothing is in flight once every answer is in; a margin all the same
    audit = shop.assert_books_balance(SKU)
    assert audit["remaining"] == audit["database_remaining"], audit


def _sell_out_and_reset_amid_buyers(shop, sku, strategy, tag, keyed):
    """Buyers keep coming while the sale sells out (3 units) and is reset 15 times, the
    last time to plenty: the new sale must sell, not answer ``sold_out``."""
    shop.reset(sku, 3, strategy)
    stop, counter, lock, answers = threading.Event(), itertools.count(), threading.Lock(), []

    def buyer():
        while not stop.is_set():
            with lock:
                n = next(counter)
            key = f"{tag}-key-{n}" if keyed and n % 2 else None
            answers.append(shop.buy(f"{tag}-{n}", sku, key=key).status)

    threads = [threading.Thread(target=buyer) for _ in range(32)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(15):
            time.sleep(0.08)
            shop.reset(sku, 3, strategy)
        shop.reset(sku, 100_000, strategy)
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(answers) <= {200, 201, 409, 503}, sorted(set(answers))
    time.sleep(0.3)
    # the books of the lock-free paths that take units in Redis may be one in-flight
    # purchase off after a reset amid buyers (README: known, left to the lead); sql's
    # must balance
    audit = shop.assert_books_balance(sku) if strategy == "sql" else shop.audit(sku)
    assert audit["remaining"] > 0, audit
    late = shop.buy(f"{tag}-late", sku)
    assert late.status == 201, (late.status, late.body, audit)


@pytest.mark.parametrize("strategy, keyed", [("sql", True), ("sql", False),
                                             ("atomic-sharded", False), ("atomic", True)])
def test_a_sale_reset_amid_its_sell_out_is_not_left_sold_out(shop, strategy, keyed):
    # A buyer who had just found the old sale sold out set the sold-out flag after the
    # reset had cleared it (a missing stock key reads as 0): the new sale, 100000 units
    # on the shelf, answered 409 sold_out to everyone until the next reset
    # (sql with keys and atomic-sharded: 1 run in 2 each).
    for round_ in range(3):
        _sell_out_and_reset_amid_buyers(shop, SKU, strategy,
                                        f"stuck-{strategy}-{keyed}-{round_}", keyed)
