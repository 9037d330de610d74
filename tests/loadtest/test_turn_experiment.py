"""The ``x-turn<N>`` prototype (bench ``--experimental``): barging only within a turn.

A prototype still has to be what its figures claim: a holder that releases within its
turn may take the lock straight back while others queue, a release after the turn hands
the lock to the head of the queue, and nobody outside the queue takes it then.
"""

from __future__ import annotations

import time

from loadtest.bench.experiments import TurnTokenLock

TURN_MS = 200  # long enough that a test's few round trips land within it


def _lock(client, turn_ms: float = TURN_MS) -> TurnTokenLock:
    return TurnTokenLock(client, "turn-test", ttl_ms=10_000, turn_ms=turn_ms)


def _queue(lock: TurnTokenLock) -> None:
    """Make ``lock`` a queued waiter (join, no block)."""
    lock._new_acquisition()
    lock._queued = True
    assert lock._queue_try()[0] == 0


def test_a_release_within_the_turn_lets_the_holder_barge_back_past_the_queue(redis_client):
    holder, waiter = _lock(redis_client), _lock(redis_client)
    assert holder.acquire(blocking=False)
    _queue(waiter)  # the holder's turn starts now
    holder.release()
    assert not holder.queue_first  # released within the turn: not handed on
    assert holder.acquire(blocking=False)  # barges back although someone queues
    holder.release()


def test_a_release_after_the_turn_hands_the_lock_to_the_queue_head(redis_client):
    holder, waiter, newcomer = (_lock(redis_client) for _ in range(3))
    assert holder.acquire(blocking=False)
    _queue(waiter)
    time.sleep(TURN_MS / 1000 + 0.05)
    holder.release()
    assert holder.queue_first  # handed on: its next acquire queues, it does not try
    assert redis_client.get(holder.key) == waiter._uuid.encode()
    assert not newcomer.acquire(blocking=False)  # nobody barges past the queue's holder
    assert waiter._took(waiter._queue_try())  # the waiter claims what it was handed
    assert waiter.fencing_token > holder.fencing_token


def test_a_lock_found_free_after_the_turn_goes_to_the_head_not_to_the_newcomer(redis_client):
    holder, waiter, newcomer = (_lock(redis_client) for _ in range(3))
    assert holder.acquire(blocking=False)
    _queue(waiter)
    holder.release()  # within the turn: freed, not handed on
    time.sleep(TURN_MS / 1000 + 0.05)
    assert not newcomer.acquire(blocking=False)
    assert redis_client.get(holder.key) == waiter._uuid.encode()  # the newcomer's try
    # handed it to the head (and rang the head's wake list)
    assert redis_client.llen(f"{holder.key}:wake:{waiter._uuid}") == 1
