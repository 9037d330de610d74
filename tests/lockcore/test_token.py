"""token: SET NX PX + compare-and-delete; fencing tokens; a killed holder frees itself."""

from __future__ import annotations

import time

import pytest

import lockcore
from lockcore import LockNotOwned
from tests.lockcore.processes import holders

pytestmark = pytest.mark.timeout(60)


def test_fencing_tokens_strictly_increase_across_holders_and_releases(redis_client):
    tokens = []
    for _ in range(5):
        lock = lockcore.create("token", redis_client, "stock:sku-1")
        assert lock.acquire()
        tokens.append(lock.fencing_token)
        lock.release()
    assert tokens == sorted(set(tokens)) and len(tokens) == 5


def test_releasing_an_expired_lock_does_not_free_the_next_holders(redis_client, fake_clock):
    # Seed 002's timeline: A pauses past its ttl, B takes the lock, A wakes and releases.
    a = lockcore.create("token", redis_client, "stock:sku-1", ttl_ms=50)
    b = lockcore.create("token", redis_client, "stock:sku-1", ttl_ms=10_000)
    assert a.acquire()
    time.sleep(0.1)
    assert b.acquire(blocking=False)
    with pytest.raises(LockNotOwned):
        a.release()
    assert b.held(), "A's late release must not delete B's lock"
    assert b.fencing_token > a.fencing_token


def test_extend_replaces_the_ttl_and_only_the_owner_can_extend(redis_client):
    lock = lockcore.create("token", redis_client, "res", ttl_ms=1_000)
    assert lock.acquire()
    lock.extend(30_000)
    assert 1_000 < redis_client.pttl(lock.key) <= 30_000
    redis_client.set(lock.key, "someone else")
    with pytest.raises(LockNotOwned):
        lock.extend()
    assert lock.lost


def test_a_killed_holders_lock_is_free_within_ttl_plus_fifty_ms(redis_client, redis_url):
    ttl_ms = 500
    spec = {"mode": "hold", "strategy": "token", "backend": {"redis": redis_url},
            "resource": "stock:sku-1", "options": {"ttl_ms": ttl_ms}}
    with holders(spec) as (holder,):
        acquired_at = holder.read()["t"]  # CLOCK_MONOTONIC is system-wide on Linux
        holder.kill()  # mid-section: no release
    waiter = lockcore.create("token", redis_client, "stock:sku-1", wait="notify")
    assert waiter.acquire(timeout=5)
    recovered_after = time.monotonic() - acquired_at
    assert recovered_after <= (ttl_ms + 50) / 1000, recovered_after


def test_token_lock_needs_a_ttl(redis_client):
    with pytest.raises(ValueError):
        lockcore.create("token", redis_client, "res", ttl_ms=None)


def test_leaving_with_after_the_ttl_ran_out_raises_lock_lost(redis_client):
    lock = lockcore.create("token", redis_client, "res", ttl_ms=50)
    with pytest.raises(lockcore.LockLost):
        with lock:
            time.sleep(0.1)  # the section outlives the ttl; no watchdog


def test_a_ttl_in_float_milliseconds_is_taken_rounded_up(redis_client):
    """``ttl_ms=2.5 * 1000`` was a TypeError; redis-py's own Lock takes float timeouts."""
    lock = lockcore.create("token", redis_client, "res", ttl_ms=2.5 * 1000)
    assert lock.ttl_ms == 2_500
    assert lock.acquire(blocking=False)
    assert 2_000 < redis_client.pttl(lock.key) <= 2_500
    lock.extend(1_000.2)  # rounded up, never shorter than asked
    assert 900 < redis_client.pttl(lock.key) <= 1_001
    lock.release()
    assert lockcore.create("token", redis_client, "res", ttl_ms=0.5).ttl_ms == 1


@pytest.mark.parametrize("ttl_ms, error", [
    (float("nan"), ValueError), (float("inf"), ValueError), (0.0, ValueError),
    (-1.5, ValueError), ("1000", TypeError), (True, TypeError),
])
def test_a_ttl_that_is_no_number_of_milliseconds_is_refused(redis_client, ttl_ms, error):
    with pytest.raises(error, match="ttl_ms"):
        lockcore.create("token", redis_client, "res", ttl_ms=ttl_ms)
