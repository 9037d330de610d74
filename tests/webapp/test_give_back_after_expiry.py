"""A lock section's give-back after its lock ran out: the next holder's SET must not
overwrite it.

A section reads the stock, sets it one lower and writes the order; if the row cannot
be written its unit goes back (``give_back.lua``: INCRBY). Inside the lock nobody else
writes the stock. But the lock expires (its TTL) while the write waits for a stalled
database, and the next holder reads the stock and SETs it a unit lower: a give-back
landing between its read and its SET was overwritten (a review)::

    ann:   holds the lock: reads 10, sets 9; her row's write waits for the database
    lock:  expires; bob takes it and reads 9
    ann:   her write fails: her unit goes back, Redis 10
    bob:   sets 8 and writes his row: Redis 8, the database 9, a unit gone for good

Now the section renews its lock before giving back (``section.lease_renewed``); a lock
no longer its own means the unit goes back later, under the lock (``orders.IN_DOUBT``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.webapp.conftest import SKU, backends
from tests.webapp.lategiveback import stall_then_fail, token_shop, token_worker
from webapp import allocation, lockedpath, orders


@pytest.mark.parametrize("combine", [False, True], ids=["plain", "combined"])
def test_a_give_back_after_the_lock_ran_out_is_not_overwritten_by_the_next_holder(
        database_url, redis_url, redis_client, monkeypatch, combine):
    # two workers, as under gunicorn: one worker's buyers combine (or queue) in it
    apps = {"ann": token_shop(database_url, redis_url, combine, ttl_ms=500),
            "bob": token_worker(database_url, redis_url, combine, ttl_ms=500)}
    module = allocation if combine else lockedpath
    bob_read, ann_done = threading.Event(), threading.Event()

    def until_bob_read() -> None:
        assert bob_read.wait(10)

    stall_then_fail(monkeypatch, combine, "ann", until_bob_read)  # the database stalls
    real_set_stock = module.set_stock

    def set_stock(client: Any, key: str, units: int, **kwargs: Any) -> Any:
        if threading.current_thread().name == "bob":  # read, not yet written
            bob_read.set()
            assert ann_done.wait(10)
        return real_set_stock(client, key, units, **kwargs)

    monkeypatch.setattr(module, "set_stock", set_stock)
    answers: dict[str, int] = {}

    def buy(user: str) -> None:
        answers[user] = apps[user].test_client().post(
            f"/api/products/{SKU}/purchase", json={"user_id": user}).status_code
        if user == "ann":
            ann_done.set()

    ann = threading.Thread(target=buy, args=("ann",), name="ann")
    ann.start()
    while not redis_client.exists("lock:{stock:" + SKU + "}") and ann.is_alive():
        time.sleep(0.005)  # until ann is in her section
    bob = threading.Thread(target=buy, args=("bob",), name="bob")
    bob.start()
    ann.join(15)
    bob.join(15)
    assert answers == {"ann": 503, "bob": 201}
    orders.IN_DOUBT.drain()  # what a later purchase, or the worker's timer, does
    audit = apps["bob"].test_client().get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["orders"],
            audit["consistent"]) == (9, 9, 1, True), audit
    for app in apps.values():
        backends(app).close()


def test_a_lock_that_never_expires_is_no_lease_once_it_is_lost():
    """``zookeeper`` locks do not expire, but a suspended or ended session marks them
    ``lost``, and another worker's may hold the lock then: the give-back waits for it."""
    from types import SimpleNamespace

    from webapp.section import lease_renewed

    assert lease_renewed(SimpleNamespace(expires=False, lost=False))
    assert not lease_renewed(SimpleNamespace(expires=False, lost=True))
