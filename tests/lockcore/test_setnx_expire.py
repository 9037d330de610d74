"""setnx-expire: a crash between SETNX and EXPIRE leaves the lock with no TTL, forever."""

from __future__ import annotations

import pytest

import lockcore
from tests.lockcore.processes import holders

pytestmark = pytest.mark.timeout(60)


class Crash(Exception):
    pass


def crash() -> None:
    raise Crash("the process dies between SETNX and EXPIRE")


def test_a_crash_between_setnx_and_expire_leaves_the_lock_forever(redis_client):
    doomed = lockcore.create("setnx-expire", redis_client, "stock:sku-1", ttl_ms=200,
                             crash_between=crash)
    with pytest.raises(Crash):
        doomed.acquire(blocking=False)
    assert redis_client.pttl(doomed.key) == -1
    waiter = lockcore.create("setnx-expire", redis_client, "stock:sku-1", ttl_ms=200)
    assert waiter.acquire(timeout=0.5) is False, "long past the 200 ms ttl, still stuck"
    assert redis_client.pttl(doomed.key) == -1


def test_a_holder_killed_inside_the_window_leaves_the_lock_forever(redis_client, redis_url):
    spec = {"mode": "window", "strategy": "setnx-expire", "backend": {"redis": redis_url},
            "resource": "stock:sku-1", "options": {"ttl_ms": 200}}
    with holders(spec) as (holder,):
        assert holder.read()["window"]  # SETNX done, EXPIRE not yet sent
        holder.kill()
    waiter = lockcore.create("setnx-expire", redis_client, "stock:sku-1", ttl_ms=200)
    assert waiter.acquire(timeout=0.5) is False
    assert redis_client.pttl(waiter.key) == -1


def test_without_a_crash_the_lock_gets_its_ttl(redis_client):
    lock = lockcore.create("setnx-expire", redis_client, "res", ttl_ms=5_000)
    assert lock.acquire(blocking=False)
    assert 0 < redis_client.pttl(lock.key) <= 5_000
    lock.extend(20_000)
    assert 5_000 < redis_client.pttl(lock.key) <= 20_000


def test_setnx_expire_needs_a_ttl(redis_client):
    with pytest.raises(ValueError):
        lockcore.create("setnx-expire", redis_client, "res", ttl_ms=None)
