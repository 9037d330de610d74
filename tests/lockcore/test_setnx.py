"""setnx: a SIGKILLed holder blocks everyone forever, and anyone's DEL frees the lock."""

from __future__ import annotations

import pytest

import lockcore
from tests.lockcore.processes import holders

pytestmark = pytest.mark.timeout(60)


def test_a_killed_holder_leaves_the_lock_stuck_with_no_ttl(redis_client, redis_url):
    spec = {"mode": "hold", "strategy": "setnx", "backend": {"redis": redis_url},
            "resource": "stock:sku-1"}
    with holders(spec) as (holder,):
        assert holder.read()["held"]
        holder.kill()  # SIGKILL: no finally, no release
    waiter = lockcore.create("setnx", redis_client, "stock:sku-1")
    assert waiter.acquire(timeout=1) is False, "the dead holder's lock should still block"
    assert redis_client.pttl(waiter.key) == -1, "stuck forever: the key has no TTL"


def test_anyone_can_delete_the_lock_and_let_a_second_holder_in(redis_client):
    holder = lockcore.create("setnx", redis_client, "stock:sku-1")
    intruder = lockcore.create("setnx", redis_client, "stock:sku-1")
    assert holder.acquire(blocking=False)
    redis_client.delete(holder.key)  # an operator, a script, a buggy client
    assert intruder.acquire(blocking=False)
    assert holder.token is not None and intruder.token is not None  # two holders


def test_release_deletes_whoever_holds_the_lock_now(redis_client):
    first = lockcore.create("setnx", redis_client, "stock:sku-1")
    second = lockcore.create("setnx", redis_client, "stock:sku-1")
    assert first.acquire(blocking=False)
    redis_client.delete(first.key)  # say the key was removed by hand
    assert second.acquire(blocking=False)
    first.release()  # plain DEL: no ownership check
    assert not redis_client.exists(second.key), "first's release freed second's lock"


def test_setnx_lock_does_not_expire(redis_client):
    lock = lockcore.create("setnx", redis_client, "res")
    assert lock.acquire(blocking=False)
    assert redis_client.pttl(lock.key) == -1
    with pytest.raises(NotImplementedError):
        lock.extend(1000)


@pytest.mark.parametrize("strategy", ["setnx", "local"])
def test_a_ttl_given_to_a_lock_that_never_expires_is_not_reported(redis_client, strategy):
    """A caller passing ``ttl_ms`` to every strategy (the shop does) got a setnx handle
    whose ``ttl_ms`` said 5000 while its key had no TTL: a crashed holder looked freed
    after 5 s, and blocks for ever (an audit)."""
    lock = lockcore.create(strategy, redis_client, "stock:sku-1", ttl_ms=5_000)
    assert lock.ttl_ms is None
    assert lock.acquire(blocking=False)
    try:
        if strategy == "setnx":
            assert redis_client.pttl(lock.key) == -1
    finally:
        lock.release()
