"""multi: all-or-nothing locking of many resources in one script, on a real Redis."""

from __future__ import annotations

import random
import threading
import time

import pytest

import lockcore
from lockcore import LockNotOwned


def multi(client, resources, **options) -> lockcore.DistributedLock:
    return lockcore.create("multi", client, resources, **options)


def test_a_list_is_taken_whole_when_every_resource_is_free(redis_client) -> None:
    lock = multi(redis_client, ["bill:1", "bill:2", "bill:3"])
    assert lock.acquire(blocking=False)
    assert lock.held()
    for r in ("bill:1", "bill:2", "bill:3"):
        assert redis_client.get(f"lock:{{multi}}:r:{r}").decode() == lock.token
    lock.release()
    assert not lock.locked()


def test_one_held_resource_refuses_the_whole_list_and_leaves_no_partial_hold(
        redis_client) -> None:
    blocker = multi(redis_client, ["bill:2"])
    assert blocker.acquire(blocking=False)
    batch = multi(redis_client, ["bill:1", "bill:2", "bill:3"])
    assert not batch.acquire(blocking=False)
    assert not redis_client.exists("lock:{multi}:r:bill:1", "lock:{multi}:r:bill:3")
    assert batch.holder_ttl_ms is not None and batch.holder_ttl_ms > 0
    blocker.release()
    assert batch.acquire(blocking=False)
    batch.release()


def test_overlapping_lists_contend_and_disjoint_lists_do_not(redis_client) -> None:
    ab = multi(redis_client, ["a", "b"])
    bc = multi(redis_client, ["c", "b"])
    cd = multi(redis_client, ["d", "c"])
    assert ab.acquire(blocking=False)
    assert not bc.acquire(blocking=False)
    assert cd.acquire(blocking=False)
    ab.release()
    cd.release()
    assert bc.acquire(blocking=False)
    bc.release()


def test_release_frees_only_what_this_acquisition_still_holds(redis_client) -> None:
    mine = multi(redis_client, ["x", "y"], ttl_ms=100)
    assert mine.acquire(blocking=False)
    time.sleep(0.25)  # both keys expire: we are a paused holder
    theirs = multi(redis_client, ["y"])
    assert theirs.acquire(blocking=False)
    with pytest.raises(LockNotOwned, match="0 of 2"):
        mine.release()
    assert theirs.held()  # our late release did not free their "y"
    theirs.release()


def test_a_release_that_finds_one_resource_taken_over_says_the_lock_was_not_ours(
        redis_client) -> None:
    """Half a hold is not a hold: the section ran with ``y`` in another holder's hands,
    and release must say so (a check that only ``0 of n`` is refused let it pass)."""
    mine = multi(redis_client, ["x", "y"], ttl_ms=60_000)
    assert mine.acquire(blocking=False)
    redis_client.delete(mine.keys[1])  # "y" expired alone (an evicting Redis, a pexpire)
    theirs = multi(redis_client, ["y"])
    assert theirs.acquire(blocking=False)
    with pytest.raises(LockNotOwned, match="1 of 2"):
        mine.release()
    assert not redis_client.exists(mine.keys[0])  # what was still ours is freed
    assert theirs.held()
    theirs.release()


def test_extend_refreshes_every_resource_but_only_for_the_owner(redis_client) -> None:
    lock = multi(redis_client, ["p", "q"], ttl_ms=1_000)
    lock.acquire()
    lock.extend(60_000)
    assert all(redis_client.pttl(k) > 10_000 for k in lock.keys)
    redis_client.set(lock.keys[1], "someone-else")
    with pytest.raises(LockNotOwned):
        lock.extend()
    assert redis_client.pttl(lock.keys[0]) > 10_000  # refused as a whole: nothing done
    assert lock.lost


def test_every_key_of_one_script_shares_one_hash_tag(redis_client) -> None:
    lock = multi(redis_client, ["sku-1", "sku-2", "warehouse:9"], hash_tag="shop")
    with lock:
        keys = [k.decode() for k in redis_client.keys("lock:*")]
    assert keys and all(k.startswith("lock:{shop}:") for k in keys)


def test_fencing_tokens_grow_across_overlapping_lists(redis_client) -> None:
    tokens = []
    for resources in (["a"], ["a", "b"], ["b", "c"], ["a"]):
        with multi(redis_client, resources) as lock:
            tokens.append(lock.fencing_token)
    assert tokens == sorted(set(tokens))


def test_a_notify_waiter_wakes_when_the_resource_that_blocked_it_is_freed(
        redis_client) -> None:
    holder = multi(redis_client, ["n2"])
    holder.acquire()
    waiter = multi(redis_client, ["n1", "n2"], wait="notify")
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    thread.start()
    time.sleep(0.1)
    assert waiter.signal_key == "lock:{multi}:s:n2"
    holder.release()
    thread.join(15)
    assert got == [True]
    waiter.release()


def test_a_wake_up_taken_by_a_waiter_that_cannot_use_it_is_passed_on(redis_client) -> None:
    """W waits for [wa, wc], V for [wa]. wa's release woke W (first in line), which
    found wc held and went to wait on wc's list with wa's only wake-up: V slept on
    until its block ran out (a lockcore audit: 653 ms; up to a second)."""
    x, y = multi(redis_client, ["wa"]), multi(redis_client, ["wc"])
    assert x.acquire(blocking=False) and y.acquire(blocking=False)
    w = multi(redis_client, ["wa", "wc"], wait="notify")
    v = multi(redis_client, ["wa"], wait="notify")
    got_at: dict[str, float] = {}

    def take(name: str, lock: lockcore.DistributedLock) -> None:
        if lock.acquire(timeout=10):
            got_at[name] = time.monotonic()

    waiters = [threading.Thread(target=take, args=("w", w)),
               threading.Thread(target=take, args=("v", v))]
    waiters[0].start()
    time.sleep(0.2)  # W blocks on wa's list first: the first wake-up is W's
    waiters[1].start()
    time.sleep(0.2)  # V blocks behind it, with 0.8 s of its block left
    released_at = time.monotonic()
    x.release()
    waiters[1].join(5)
    try:
        assert "v" in got_at and got_at["v"] - released_at < 0.4, got_at
    finally:  # let W in and out either way: no thread left blocked on the client
        v.release()
        y.release()
        waiters[0].join(5)
        w.release()


def test_random_overlapping_batches_never_lose_an_update(redis_client) -> None:
    resources = [f"acct:{i}" for i in range(5)]
    start = threading.Event()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(15):
            batch = rng.sample(resources, rng.randint(1, 3))
            with multi(redis_client, batch, poll_ms=2, timeout=20):
                start.wait()
                for r in batch:  # a read-modify-write the lock must protect
                    value = int(redis_client.get(f"count:{r}") or 0)
                    redis_client.set(f"count:{r}", value + 1)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join(60)
    expected: dict[str, int] = {r: 0 for r in resources}
    for seed in range(4):
        rng = random.Random(seed)
        for _ in range(15):
            for r in rng.sample(resources, rng.randint(1, 3)):
                expected[r] += 1
    assert {r: int(redis_client.get(f"count:{r}") or 0) for r in resources} == expected


def test_an_empty_list_is_refused(redis_client) -> None:
    with pytest.raises(TypeError):
        multi(redis_client, [])


@pytest.mark.parametrize("wait", ["poll", "notify"])
def test_a_resource_named_like_another_ones_wake_list_is_a_resource_of_its_own(
        redis_client, wait) -> None:
    # with one shared prefix, "x:signal" was x's wake-up list: releasing x deleted it
    b = multi(redis_client, ["x:signal"], wait=wait)
    assert b.acquire(blocking=False)
    a = multi(redis_client, ["x"], wait=wait)
    assert a.acquire(blocking=False)
    a.release()
    assert b.held()
    assert not multi(redis_client, ["x:signal"]).acquire(blocking=False)
    b.release()


def test_a_resource_named_fence_is_not_the_fencing_counter(redis_client) -> None:
    first = multi(redis_client, ["a"])
    assert first.acquire(blocking=False)
    first.release()
    fence = multi(redis_client, ["fence"], ttl_ms=200)
    assert fence.acquire(blocking=False)  # was refused: the counter's key exists
    assert fence.fencing_token > first.fencing_token
    time.sleep(0.3)  # its key expires; the counter must not go with it
    later = multi(redis_client, ["b"])
    assert later.acquire(blocking=False)
    assert later.fencing_token > fence.fencing_token
    later.release()


def test_a_notify_waiter_whose_redis_dies_raises_within_its_timeout():
    # its BLPOP went through redis-py's retry with backoff: a ConnectionError after
    # 4.4 s of a 3 s timeout, where token and fair raised at once (a lockcore audit)
    import redis

    from lockcore.embedded import RedisServer

    server = RedisServer().start()
    # as redis-py's docs make one: its default retry (from_url gives none)
    client = redis.Redis(host="127.0.0.1", port=server.port)
    outcome: list[object] = []
    try:
        holder = lockcore.create("multi", client, ["a", "b"], ttl_ms=5_000)
        assert holder.acquire(blocking=False)
        waiter = lockcore.create("multi", client, ["b"], ttl_ms=5_000, wait="notify")

        def wait() -> None:
            started = time.monotonic()
            try:
                outcome.append(waiter.acquire(timeout=3))
            except redis.ConnectionError as exc:
                outcome.append(exc)
            outcome.append(time.monotonic() - started)

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)  # blocked in BLPOP
        server.kill()
        thread.join(10)
        assert len(outcome) == 2, outcome
        assert isinstance(outcome[0], redis.ConnectionError), outcome
        assert outcome[1] < 2.0, f"raised after {outcome[1]:.2f}s"
    finally:
        client.close()
        server.cleanup()
