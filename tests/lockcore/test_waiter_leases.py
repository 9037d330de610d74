"""Waiters' leases and wake-up signals: ``fair`` skips a waiter whose lease ran out,
renews a live waiter's lease at every call, and leases three of its longest polls;
``token_release``'s wake-up expires when nobody takes it. Each was a mutation
survivor: live waiters stalled behind dead ones, or lost their FIFO place."""

from __future__ import annotations

import time

import lockcore
from lockcore import scripts
from lockcore.strategies.fair import FairLock


def test_a_release_hands_the_lock_straight_past_a_waiter_whose_lease_ran_out(redis_client):
    # L7: grant_next's skip of expired leases; without it the dead waiter is handed the
    # lock for its claim window first, and every live waiter behind it stalls that long
    holder = lockcore.create("fair", redis_client, "fair-dead")
    assert isinstance(holder, FairLock) and holder.acquire()
    holder._script(keys=holder.keys, args=["acquire", "dead", holder.ttl_ms, 100])
    holder._script(keys=holder.keys, args=["acquire", "live", holder.ttl_ms, 10_000])
    time.sleep(0.25)  # the dead waiter's lease runs out; it never calls again
    holder.release()
    assert redis_client.get(holder.key) == b"live"  # not b"dead"
    assert not redis_client.exists(f"{holder.keys[6]}dead")  # nor its wake list left


def test_a_release_wake_up_nobody_takes_expires(redis_client):
    # L3: the signal's TTL; without it a wake-up nobody took waits forever, and a
    # waiter that arrives hours later wakes at once for nothing
    release = scripts.script(redis_client, "token_release")
    redis_client.set("lock:{x}", "tok")
    assert release(keys=["lock:{x}", "lock:{x}:signal"], args=["tok", 500]) in (1, 2)
    assert 0 < redis_client.pttl("lock:{x}:signal") <= 500


def test_a_waiter_that_keeps_calling_keeps_its_place_past_its_first_lease(redis_client):
    # L9: every call renews the lease (fair.py step 2); renewed only at the join, a live
    # waiter queued longer than one lease is skipped as dead and loses its turn
    holder = lockcore.create("fair", redis_client, "fair-renew")
    assert isinstance(holder, FairLock) and holder.acquire()
    for _ in range(8):  # a live waiter polling every 200 ms, lease 1 s: 1.6 s queued
        holder._script(keys=holder.keys, args=["acquire", "patient", holder.ttl_ms, 1_000])
        time.sleep(0.2)
    holder.release()
    assert redis_client.get(holder.key) == b"patient"


def test_a_fair_waiters_lease_is_three_times_its_longest_poll(redis_client):
    # L16: the default lease covers 3 polls: one slow poll must not make a waiter "dead"
    lock = lockcore.create("fair", redis_client, "fair-lease", max_poll_ms=5_000)
    assert lock.lease_ms == 15_000
