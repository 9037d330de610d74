"""getset: the lock is a wall-clock timestamp, so a clock that runs ahead steals it."""

from __future__ import annotations

import pytest

import lockcore
from lockcore import LockNotOwned

pytestmark = pytest.mark.timeout(60)

TTL_MS = 10_000


def test_a_client_whose_clock_runs_ahead_steals_a_live_lock(redis_client):
    honest = lockcore.create("getset", redis_client, "stock:sku-1", ttl_ms=TTL_MS)
    ahead = lockcore.create("getset", redis_client, "stock:sku-1", ttl_ms=TTL_MS,
                            clock_skew_s=60)  # NTP has not reached this machine
    assert honest.acquire(blocking=False)
    assert ahead.acquire(blocking=False), "the skewed client should take the live lock"
    # Double grant: both believe they hold it, and Redis now has the skewed expiry.
    assert honest.token is not None and ahead.token is not None
    assert ahead.held()
    assert int(redis_client.get(honest.key)) == ahead.expiry_ms


def test_a_losing_getset_overwrites_the_winners_expiry(redis_client):
    redis_client.set("lock:{stock:sku-1}", 1)  # the 1970s: a long-dead holder's timestamp
    winner = lockcore.create("getset", redis_client, "stock:sku-1", ttl_ms=TTL_MS)
    won: list[bool] = []
    # The loser reads the dead timestamp, then the winner runs its whole takeover,
    # then the loser's GETSET lands.
    loser = lockcore.create("getset", redis_client, "stock:sku-1", ttl_ms=TTL_MS,
                            clock_skew_s=5,  # a little ahead, less than the ttl
                            between_get_and_getset=lambda: won.append(winner.acquire(False)))
    assert loser.acquire(blocking=False) is False
    assert won == [True]
    stored = int(redis_client.get(winner.key))
    assert stored != winner.expiry_ms, "the loser's GETSET replaced the winner's expiry"
    assert stored >= winner.expiry_ms + 4_000  # it follows the loser's skewed clock
    assert winner.held() is False, "the winner's own check no longer recognises its lock"


def test_an_expired_timestamp_is_taken_over_by_exactly_one_client(redis_client):
    redis_client.set("lock:{res}", 1)  # a crashed holder's long-past expiry
    first = lockcore.create("getset", redis_client, "res", ttl_ms=TTL_MS)
    second = lockcore.create("getset", redis_client, "res", ttl_ms=TTL_MS)
    assert first.acquire(blocking=False)
    assert second.acquire(blocking=False) is False
    assert first.held()


def test_release_after_the_timestamp_passed_raises_and_keeps_the_new_holders_lock(
        redis_client, fake_clock):
    slow = lockcore.create("getset", redis_client, "res", ttl_ms=1_000, clock=fake_clock)
    assert slow.acquire(blocking=False)
    fake_clock.sleep(2)  # the holder stalls past its timestamp
    successor = lockcore.create("getset", redis_client, "res", ttl_ms=1_000,
                                clock=fake_clock)
    assert successor.acquire(blocking=False)
    with pytest.raises(LockNotOwned):
        slow.release()
    assert successor.held()
    successor.release()
    assert not redis_client.exists(successor.key)


def test_extend_moves_the_stored_timestamp_and_keeps_the_lock(redis_client, fake_clock):
    lock = lockcore.create("getset", redis_client, "res", ttl_ms=1_000, clock=fake_clock)
    assert lock.acquire(blocking=False)
    fake_clock.sleep(0.9)
    lock.extend()
    fake_clock.sleep(0.9)  # past the first timestamp, inside the extended one
    assert lock.held()
    assert int(redis_client.get(lock.key)) == lock.expiry_ms
    rival = lockcore.create("getset", redis_client, "res", ttl_ms=1_000, clock=fake_clock)
    assert rival.acquire(blocking=False) is False


def test_a_crashed_holders_passed_timestamp_is_not_locked(redis_client, fake_clock):
    """``locked()`` said True for a lock whose stored timestamp had passed, which the
    next acquire took over at once: it asked ``EXISTS``, and the key has no Redis TTL
    (a lockcore audit)."""
    crashed = lockcore.create("getset", redis_client, "res", ttl_ms=200, clock=fake_clock)
    rival = lockcore.create("getset", redis_client, "res", ttl_ms=200, clock=fake_clock)
    assert crashed.acquire(blocking=False)
    assert rival.locked()
    fake_clock.sleep(0.4)  # the holder never comes back
    assert redis_client.exists(crashed.key)
    assert not rival.locked()
    assert rival.acquire(blocking=False)
    assert rival.locked()


def test_a_timestamp_that_is_exactly_now_is_taken_over_not_overwritten_and_lost(
        redis_client, fake_clock):
    """GET read a stored timestamp equal to our clock as passed (held only while it is in
    the future), but GETSET's answer of that same timestamp read as "someone beat us":
    the waiter wrote its own expiry and backed off, so nobody held the lock for another
    whole TTL; eight notify waiters on a 0.5 s lock took up to 2 s (a lockcore audit)."""
    crashed = lockcore.create("getset", redis_client, "res", ttl_ms=500, clock=fake_clock)
    assert crashed.acquire(blocking=False)
    stored = int(redis_client.get(crashed.key))
    while crashed.now_ms() < stored:  # on to the very millisecond stored: one is
        fake_clock.sleep(0.0001)      # past, the other not yet (floats: step there)
    assert crashed.now_ms() == stored
    waiter = lockcore.create("getset", redis_client, "res", ttl_ms=500, clock=fake_clock)
    assert waiter.acquire(blocking=False)
    assert waiter.held()
