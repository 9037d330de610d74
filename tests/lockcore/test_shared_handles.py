"""A handle shared by threads (they take turns on it, ``base._occupy``): whatever goes
wrong while one thread holds it, the others must not wait on it for ever (a session-28
review found both below)."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import lockcore
from lockcore.embedded import RedisServer

pytestmark = pytest.mark.timeout(60)


def test_a_release_that_cannot_reach_redis_still_frees_the_handle():
    # its wake-up signal (Redis I/O) raised before the handle was vacated: every other
    # thread's acquire then timed out, for good
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        lock = lockcore.create("setnx-expire", client, "shared-release", ttl_ms=1000)
        assert lock.acquire(timeout=1)
        server.pause()  # SIGSTOP: the release cannot reach Redis
        try:
            with pytest.raises(redis.RedisError):
                lock.release()
        finally:
            server.resume()
        time.sleep(1.2)  # the lock's TTL is over; Redis answers again
        got: list[bool] = []
        other = threading.Thread(target=lambda: got.append(lock.acquire(timeout=2)))
        other.start()
        other.join(10)
        assert got == [True]
        lock.release()
    finally:
        server.stop()


def test_an_on_lost_callback_acquiring_the_handle_does_not_deadlock_its_release():
    # extend() called on_lost holding the handle's mutex; a callback acquiring the
    # handle waited for the holder's release, which waited for that mutex
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        again: list[bool] = []

        def on_lost(lock: lockcore.DistributedLock, reason: str) -> None:
            again.append(lock.acquire(timeout=None))

        lock = lockcore.create("token", client, "shared-lost", ttl_ms=600, watchdog=True,
                               on_lost=on_lost)
        assert lock.acquire(timeout=1)
        client.delete(lock.key)  # taken away: the next renewal finds it gone
        time.sleep(0.6)
        released = threading.Event()

        def release() -> None:
            try:
                lock.release()
            except lockcore.LockError:
                pass
            released.set()

        threading.Thread(target=release, daemon=True).start()
        assert released.wait(10)
        deadline = time.monotonic() + 10
        while not again and time.monotonic() < deadline:
            time.sleep(0.05)
        assert again == [True]
        lock.release()
    finally:
        server.stop()
