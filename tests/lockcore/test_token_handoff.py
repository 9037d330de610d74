"""token with wait="notify": barging within ``handoff_after_ms``, a hand-off after it."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lockcore
from lockcore import scripts, waiting

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def long_blocks(monkeypatch):
    """A queued waiter's fallback wake-up is 5 s, so a quick wake-up proves a hand-off."""
    monkeypatch.setattr(waiting, "MAX_BLOCK_S", 5.0)


def notify_lock(client, handoff_after_ms=20):
    return lockcore.create("token", client, "res", wait="notify",
                           handoff_after_ms=handoff_after_ms)


def in_background(lock, timeout=30.0, then_release=False):
    got = threading.Event()

    def take() -> None:
        if lock.acquire(timeout=timeout):
            got.set()
            if then_release:
                lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    return thread, got


def wait_until_queued(client, lock):
    deadline = time.monotonic() + 10
    while client.zscore(f"{lock.key}:queue", lock._uuid) is None:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.002)


@pytest.mark.parametrize("bad", [-1, True, "20"])
def test_handoff_after_ms_must_be_a_number_not_below_zero(redis_client, bad):
    with pytest.raises(ValueError, match="handoff_after_ms"):
        notify_lock(redis_client, bad)


def test_a_releaser_that_comes_straight_back_barges_past_a_waiter_within_the_bound(
        redis_client):
    holder, waiter = notify_lock(redis_client), notify_lock(redis_client, 1_000)
    assert holder.acquire()
    thread, got = in_background(waiter)
    time.sleep(0.05)  # the waiter's try failed: it looks again only at the bound
    barged = 0
    for _ in range(20):
        holder.release()  # wakes nobody: the waiter is in normal mode
        barged += holder.acquire(blocking=False)
    assert barged == 20 and not got.is_set()
    holder.release()
    thread.join(timeout=30)
    assert got.is_set(), "the waiter looked again at its bound and found the lock free"
    waiter.release()


def test_a_queued_waiter_is_handed_the_lock_and_nobody_can_barge_in_between(redis_client):
    holder, waiter = notify_lock(redis_client), notify_lock(redis_client)
    newcomer = notify_lock(redis_client)
    assert holder.acquire()
    thread, got = in_background(waiter)
    wait_until_queued(redis_client, waiter)
    holder.release()
    assert holder.queue_first, "handed on: its next acquire skips the try that would fail"
    assert holder.acquire(blocking=False) is False
    assert newcomer.acquire(blocking=False) is False
    thread.join(timeout=30)
    assert got.is_set() and waiter.held()
    waiter.release()


def test_a_barging_holder_hands_over_at_its_first_release_after_the_waiter_starves(
        redis_client):
    # a bound of 300 ms: with 30 ms, a loaded machine (load average 20, a suite beside
    # other work) ran fewer than five release-acquire rounds before the waiter starved
    holder, waiter = notify_lock(redis_client), notify_lock(redis_client, 300)
    assert holder.acquire()
    thread, got = in_background(waiter, then_release=True)
    deadline = time.monotonic() + 10
    while waiter._first_fail is None:  # its first try failed: it is waiting now
        assert time.monotonic() < deadline, "the waiter never tried"
        time.sleep(0.001)
    before = after = 0
    for _ in range(100_000):
        queued = redis_client.zscore(f"{waiter.key}:queue", waiter._uuid) is not None
        holder.release()
        assert holder.acquire(timeout=30)
        if got.is_set():
            break
        if queued:
            after += 1
        elif waiter._first_fail is not None:  # the waiter has tried and failed
            before += 1
    assert got.is_set(), "the waiter never got the lock from a holder that kept barging"
    assert after == 0, "once queued, the waiter gets the very next release"
    assert before >= 5, "within the bound the releaser re-takes the lock (normal mode)"
    holder.release()
    thread.join(timeout=30)


def test_a_release_nobody_takes_up_is_found_by_a_waiter_in_normal_mode(redis_client):
    holder, waiter = notify_lock(redis_client), notify_lock(redis_client, 200)
    assert holder.acquire()
    thread, got = in_background(waiter)
    time.sleep(0.05)
    released_at = time.monotonic()
    holder.release()  # wakes nobody, and never comes back
    thread.join(timeout=30)
    assert got.is_set()
    assert time.monotonic() - released_at < 2.0, "at the 200 ms bound, not the 5 s fallback"
    waiter.release()


def test_handoff_after_zero_hands_every_contended_release_to_the_oldest_waiter(redis_client):
    holder = notify_lock(redis_client, 0)
    assert holder.acquire()
    waiters = [notify_lock(redis_client, 0) for _ in range(3)]
    order: list[int] = []
    threads = []
    for index, lock in enumerate(waiters):
        threads.append(threading.Thread(
            target=lambda i=index, lk=lock: lk.acquire(timeout=30) and (order.append(i),
                                                                          lk.release())))
        threads[-1].start()
        wait_until_queued(redis_client, lock)
    holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert order == [0, 1, 2]


def test_a_waiter_that_times_out_in_the_queue_leaves_it(redis_client):
    holder, waiter = notify_lock(redis_client), notify_lock(redis_client, 0)
    assert holder.acquire()
    assert waiter.acquire(timeout=0.3) is False
    assert redis_client.zcard(f"{waiter.key}:queue") == 0
    holder.release()
    assert waiter.acquire(blocking=False), "nobody dead in the queue to hand it to"
    waiter.release()


@pytest.mark.parametrize("pool", ["lane", "blocking-pool"])
def test_a_waiter_after_a_script_flush_is_handed_the_lock_at_the_release(redis_client,
                                                                         pool):
    """After ``SCRIPT FLUSH`` (or a Redis restart) the first notify-waiter's join, sent
    with ``CLIENT REPLY SKIP``, failed NOSCRIPT unseen: the script was marked loaded once
    per client for good. It never queued, the release handed nothing on, and it slept
    its whole block (a lockcore audit: 0.94 s for a release at 0.3 s)."""
    if pool == "blocking-pool":  # no lane: redis-py's Script, as the shop's client
        url = "redis://{host}:{port}/0".format(**redis_client.connection_pool.connection_kwargs)
        client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(url))
    else:
        client = redis_client
    holder, waiter = notify_lock(client), notify_lock(client)
    scripts.loaded(client, "fair")  # as an earlier join left it
    assert holder.acquire(blocking=False)
    client.script_flush()
    thread, got = in_background(waiter)
    time.sleep(0.3)  # the waiter has joined (or failed to) and blocks
    holder.release()
    handed = got.wait(2.5)  # its block is 5 s
    thread.join()
    waiter.release()
    if client is not redis_client:
        client.close()
    assert handed, "the waiter slept through the release"


@pytest.fixture(params=["acl", "renamed"])
def refused_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client refused ``CLIENT``: an ACL user's ``-client``, or a server that renamed
    the command away (``rename-command CLIENT ""``, common hardening advice: its
    "unknown command" went unrecognised, and a quarter of a busy ``token`` sale's
    buyers heard 503; a Redis audit)."""
    if request.param == "acl":
        yield request.getfixturevalue("client_without_client")
        return
    from lockcore.embedded import RedisServer

    server = RedisServer(args=["--rename-command", "CLIENT", '""']).start()
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_user_refused_client_reply_waits_and_leaves_no_reply_for_the_next_caller(
        refused_client, strategy):
    """The queue's join goes with ``CLIENT REPLY SKIP`` and one reply fewer is read. An
    ACL user refused CLIENT gets every reply: the waiter raised ``NoPermissionError``
    and its connection went back to the lane with two replies unread; the holder's
    release read one of them and raised ``LockNotOwned`` while it held the lock (a
    lockcore audit). Refused once, the pool's joins are answered and read."""
    client = refused_client
    resource = f"acl-{strategy}-{uuid.uuid4().hex[:8]}"
    options = {"handoff_after_ms": 0} if strategy == "token" else {}
    holder = lockcore.create(strategy, client, resource, ttl_ms=10_000)
    assert holder.acquire(blocking=False)
    waiter = lockcore.create(strategy, client, resource, ttl_ms=10_000, wait="notify",
                             **options)
    # fair joins that way after a release that handed the lock on (token: at its bound)
    waiter.queue_first = True
    assert waiter.acquire(timeout=0.3) is False
    holder.release()  # read its own reply, not a waiter's: no LockNotOwned
    assert holder.acquire(blocking=False)
    waiter.queue_first = True
    thread, got = in_background(waiter)
    time.sleep(0.3)  # the waiter has joined the queue and blocks (5 s)
    holder.release()
    assert got.wait(2.5), "the waiter slept through the hand-off"
    thread.join(5)
    waiter.release()


@pytest.mark.parametrize("crowding", ["slots-taken", "single-connection"])
def test_a_waiter_that_cannot_block_still_queues_at_its_bound(redis_server, crowding):
    """A notify-waiter whose pool's blocking slots are all taken polls instead of
    blocking (``waiting.blocking_slot``), and so does every waiter on a
    ``single_connection_client``. Only a block joined the queue: such a token waiter
    never did, kept polling ``SET NX`` while others were handed the lock through the
    queue, and timed out (a lockcore audit). Now it joins at its bound all the same,
    and is handed the lock at the release."""
    if crowding == "single-connection":
        client = redis.Redis.from_url(redis_server.url, single_connection_client=True)
        taken: list[threading.BoundedSemaphore] = []
    else:
        client = redis.Redis.from_url(redis_server.url, max_connections=16)
        slot = waiting.blocking_slot(client)
        taken = []
        while slot.acquire(blocking=False):  # as if other waiters blocked in them
            taken.append(slot)
    holder = lockcore.create("token", redis.Redis.from_url(redis_server.url),
                             f"crowded-{crowding}", ttl_ms=30_000)
    waiter = lockcore.create("token", client, f"crowded-{crowding}", wait="notify",
                             handoff_after_ms=20)
    assert holder.acquire(blocking=False)
    thread, got = in_background(waiter, timeout=20, then_release=True)
    try:
        wait_until_queued(holder.client, waiter)
        holder.release()
        assert got.wait(10), "handed the lock, the waiter should notice at its next poll"
    finally:
        if holder.token is not None:
            holder.release()
        thread.join(30)
        for slot in taken:
            slot.release()
        holder.client.close()
        client.close()


@contextlib.contextmanager
def own_redis(**client_options: Any) -> Iterator[tuple[Any, redis.Redis, redis.Redis]]:
    """A server of our own, a client of it with ``client_options``, and a watcher."""
    from lockcore.embedded import RedisServer

    server = RedisServer().start()
    client = redis.Redis.from_url(server.url, **client_options)
    watcher = redis.Redis.from_url(server.url)
    try:
        yield server, client, watcher
    finally:
        watcher.close()
        client.close()
        server.cleanup()


def release_while_paused(server: Any, lock: Any) -> None:
    """``lock.release()`` sent to a paused Redis: its reply lost (TimeoutError)."""
    server.pause()
    try:
        with pytest.raises(redis.TimeoutError):
            lock.release()
    finally:
        server.resume()


@pytest.mark.parametrize("then", ["settle", "acquire"])
def test_a_release_whose_reply_was_lost_is_settled_once_redis_answers(then):
    """Redis paused past the client's timeout: a ``token`` handle's first release sent
    a script Redis had not loaded, which Redis refused (NOSCRIPT) when it woke, and the
    lock stayed the handle's for its whole TTL: ``settle()`` returned False and the
    handle's own acquire waited it out (a lockcore audit: 20 s, 3 of 3 times)."""
    with own_redis(socket_timeout=0.3) as (server, client, watcher):
        lock = lockcore.create("token", client, "lost-release", ttl_ms=60_000)
        assert lock.acquire(blocking=False)
        release_while_paused(server, lock)
        assert watcher.exists("lock:{lost-release}")  # not released: held for nobody
        if then == "settle":
            assert lock.settle() is True
            assert lock.settle() is False  # once
            assert not watcher.exists("lock:{lost-release}")
        else:  # the handle's next acquire settles first
            assert lock.acquire(blocking=False)
            lock.release()
        rival = lockcore.create("token", watcher, "lost-release", ttl_ms=60_000)
        assert rival.acquire(blocking=False)
        rival.release()


def test_a_release_that_found_the_pool_full_past_its_patience_is_settled(monkeypatch):
    """Nothing was sent: the lock is ours for sure, and ``settle()`` found nothing to
    let go (a review)."""
    from lockcore import base
    from lockcore.poolfull import patiently

    with own_redis(max_connections=1) as (_, client, watcher):
        lock = lockcore.create("token", client, "full-pool", ttl_ms=60_000)
        assert lock.acquire(blocking=False)
        monkeypatch.setattr(base, "patiently", lambda call: patiently(call, 0.05))
        taken = client.connection_pool.get_connection()  # the pool's only one
        try:
            with pytest.raises(redis.exceptions.MaxConnectionsError):
                lock.release()
        finally:
            client.connection_pool.release(taken)
        assert watcher.exists("lock:{full-pool}")
        assert lock.settle() is True
        assert not watcher.exists("lock:{full-pool}")


def test_settling_a_release_redis_ran_late_lets_go_of_nothing_else():
    """A ``fair`` release whose reply was lost runs when Redis wakes: ``settle()`` then
    finds nothing of ours, and leaves the next holder's lock alone."""
    with own_redis(socket_timeout=0.3) as (server, client, watcher):
        lock = lockcore.create("fair", client, "late-release", ttl_ms=60_000)
        rival = lockcore.create("fair", watcher, "late-release", ttl_ms=60_000)
        assert lock.acquire(blocking=False)
        release_while_paused(server, lock)
        assert rival.acquire(timeout=2.0)  # Redis ran the release late
        assert lock.settle() is False
        assert rival.held()
        rival.release()


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_an_acquire_whose_reply_was_lost_is_settled_once_redis_answers(strategy):
    """Redis paused past the client's timeout: acquire raised, and Redis ran the command
    when it woke, so the lock was held for nobody for its whole TTL (an HTTP audit: a
    shop's reset lock, 90 s). ``settle()`` lets it go; the handle's next acquire
    settles first by itself."""
    from lockcore.embedded import RedisServer

    server = RedisServer().start()
    client = redis.Redis.from_url(server.url, socket_timeout=0.3)
    try:
        lock = lockcore.create(strategy, client, f"lost-reply-{strategy}", ttl_ms=60_000)
        rival = lockcore.create(strategy, redis.Redis.from_url(server.url),
                                f"lost-reply-{strategy}", ttl_ms=60_000)
        assert lock.settle() is False  # nothing to settle
        assert lock.acquire(blocking=False)  # its scripts loaded: a late one runs
        lock.release()
        server.pause()
        try:
            with pytest.raises(redis.TimeoutError):
                lock.acquire(timeout=1.0)
        finally:
            server.resume()
        assert not rival.acquire(blocking=False)  # Redis ran it late: a lock for nobody
        assert lock.settle() is True
        assert lock.settle() is False  # once
        assert rival.acquire(blocking=False)
        rival.release()
        server.pause()  # again, and this time the handle acquires next
        try:
            with pytest.raises(redis.TimeoutError):
                lock.acquire(timeout=1.0)
        finally:
            server.resume()
        assert lock.acquire(timeout=1.0)  # its own ghost settled first, not waited out
        lock.release()
        assert rival.acquire(blocking=False)
        rival.release()
    finally:
        client.close()
        server.cleanup()
