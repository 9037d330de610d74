"""naive: two clients both see "free" between GET and SET, and both hold the lock."""

from __future__ import annotations

import threading

import pytest

import lockcore
from lockcore import LockNotOwned

pytestmark = pytest.mark.timeout(60)


def test_a_rival_between_check_and_set_makes_two_holders(redis_client):
    rival = lockcore.create("naive", redis_client, "stock:sku-1")
    granted: list[bool] = []
    victim = lockcore.create("naive", redis_client, "stock:sku-1",
                             between_check_and_set=lambda: granted.append(rival.acquire(False)))
    assert victim.acquire(blocking=False)
    assert granted == [True], "the rival got the lock inside the victim's window"
    # Both handles believe they hold it; Redis has only the last SET.
    assert victim.token is not None and rival.token is not None
    assert victim.held() and not rival.held()
    with pytest.raises(LockNotOwned):
        rival.release()


def test_two_buyers_of_the_last_unit_both_get_an_order(redis_client):
    # Lost update: both threads GET "free" before either SETs (a barrier forces it),
    # both read stock 1, both write 0: two orders for one unit.
    redis_client.set("stock:sku-1", 1)
    both_checked = threading.Barrier(2, timeout=10)
    orders: list[str] = []

    def buyer(user: str) -> None:
        lock = lockcore.create("naive", redis_client, "stock:sku-1",
                               between_check_and_set=both_checked.wait)
        assert lock.acquire(timeout=5)
        stock = int(redis_client.get("stock:sku-1"))
        if stock > 0:
            both_read.wait()  # both read before either writes
            redis_client.set("stock:sku-1", stock - 1)
            orders.append(user)

    both_read = threading.Barrier(2, timeout=10)
    threads = [threading.Thread(target=buyer, args=(u,)) for u in ("alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted(orders) == ["alice", "bob"], "oversold: two orders for one unit"
    assert int(redis_client.get("stock:sku-1")) == 0


def test_without_a_rival_naive_excludes_a_second_client(redis_client):
    first = lockcore.create("naive", redis_client, "res")
    second = lockcore.create("naive", redis_client, "res")
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    assert 0 < redis_client.pttl(first.key) <= first.ttl_ms


def test_between_check_and_set_must_be_callable(redis_client):
    with pytest.raises(TypeError):
        lockcore.create("naive", redis_client, "res", between_check_and_set="no")


def test_naive_needs_a_ttl(redis_client):
    """``ttl_ms=None`` was taken: a lock with setnx's crash flaw too (no expiry, against
    this module's lesson), whose ``extend()`` then said "ttl_ms must be a number of
    milliseconds or None, not None" (a lockcore audit). Refused, as setnx-expire and
    getset refuse it."""
    with pytest.raises(ValueError, match="naive needs a ttl_ms"):
        lockcore.create("naive", redis_client, "res", ttl_ms=None)
    assert redis_client.keys("*") == []
