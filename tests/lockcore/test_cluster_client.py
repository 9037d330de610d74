"""token and fair on a real Redis Cluster of three shards, through ``RedisCluster``.

Their notify-waiters pipeline join, BLPOP and claim on one connection of the client's
pool; a ``RedisCluster`` has no pool of its own, and the first waiter that blocked
raised ``AttributeError: 'RedisCluster' object has no attribute 'connection_pool'``,
an ``acquire(timeout=...)`` under contention included (a lockcore audit). ``multi`` and
the others already fell back to ``client.blpop``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

import lockcore
from lockcore import waiting
from lockcore.embedded import RedisServer
from tests.clustermode import start_cluster, stopped_after

pytestmark = pytest.mark.timeout(90)

STRATEGIES = ["token", "fair", "multi", "setnx-expire"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[RedisServer]]:
    with stopped_after(start_cluster(3)) as nodes:
        yield nodes


@pytest.fixture
def client(cluster: list[RedisServer]) -> Iterator[RedisCluster]:
    found = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    assert len(found.get_primaries()) == 3  # a real cluster: it redirects
    yield found
    found.close()


def pair(client: RedisCluster, strategy: str) -> tuple[lockcore.DistributedLock, ...]:
    resource = f"cl-{strategy}-{uuid.uuid4().hex[:8]}"
    if strategy == "multi":
        resource = [resource, resource + ":b"]  # type: ignore[assignment]
    return tuple(lockcore.create(strategy, client, resource, wait="notify", ttl_ms=5_000)
                 for _ in range(2))


def queue_left(client: RedisCluster, lock: lockcore.DistributedLock) -> int:
    return int(client.zcard(f"{lock.key}:queue")) if hasattr(lock, "queue_keys") else 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_contended_acquire_on_a_cluster_client_times_out_without_raising(client,
                                                                            strategy):
    holder, waiter = pair(client, strategy)
    assert holder.acquire(timeout=1)
    assert waiter.acquire(timeout=0.5) is False
    assert queue_left(client, waiter) == 0  # giving up left the queue
    holder.release()
    assert waiter.acquire(blocking=False)
    waiter.release()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_waiter_on_a_cluster_client_gets_the_lock_the_holder_releases(client, strategy):
    holder, waiter = pair(client, strategy)
    assert holder.acquire(timeout=1)
    got, errors = threading.Event(), []

    def wait_for_it() -> None:
        try:
            if waiter.acquire(timeout=30):
                got.set()
        except Exception as error:  # the test thread reports it
            errors.append(error)

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    got.wait(0.3)  # the waiter blocks meanwhile (a 10 ms hand-off bound for token)
    holder.release()
    thread.join(35)
    assert not errors, errors
    assert got.is_set() and waiter.held()
    if holder.fencing_token is not None:  # setnx-expire issues none
        assert waiter.fencing_token is not None
        assert waiter.fencing_token > holder.fencing_token
    waiter.release()
    assert queue_left(client, waiter) == 0
    assert not waiter.locked()


def test_the_longest_block_fits_a_cluster_clients_socket_timeout(cluster):
    # a RedisCluster keeps its connection settings in its nodes manager, not a pool
    short = RedisCluster(host="127.0.0.1", port=cluster[0].port, socket_timeout=0.5)
    plain = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        assert waiting.longest_block_s(short) == pytest.approx(0.4)
        assert waiting.longest_block_s(plain) == waiting.MAX_BLOCK_S
    finally:
        short.close()
        plain.close()


HOLD_S = 5.0


@pytest.mark.parametrize("strategy", [*STRATEGIES, "setnx"])
def test_a_waiter_on_a_cluster_client_with_a_short_socket_timeout_waits_it_out(
        client, cluster, strategy):
    """A notify-waiter blocked ``MAX_BLOCK_S`` (0.9 s of BLPOP) on a
    ``RedisCluster(socket_timeout=0.5)``: its settings were looked for in a
    ``connection_pool`` it has not, and the waiter raised redis's ``TimeoutError``
    on a healthy cluster (a lockcore audit)."""
    resource = f"cl-short-{strategy}-{uuid.uuid4().hex[:8]}"
    if strategy == "multi":
        resource = [resource, resource + ":b"]  # type: ignore[assignment]
    options = {} if strategy == "setnx" else {"ttl_ms": 30_000}
    holder = lockcore.create(strategy, client, resource, **options)
    short = RedisCluster(host="127.0.0.1", port=cluster[0].port, socket_timeout=0.5)
    waiter = lockcore.create(strategy, short, resource, wait="notify", **options)
    assert holder.acquire(timeout=1)
    # held long enough to outlast redis-py's retries of a BLPOP cut short
    releaser = threading.Timer(HOLD_S, holder.release)
    releaser.start()
    try:
        assert waiter.acquire(timeout=10)
        waiter.release()
    finally:
        releaser.join(10)
        short.close()


def test_redlock_refuses_one_cluster_given_as_several_nodes(client, cluster):
    """Five clients of one cluster were five "nodes": every acquire said False, without
    a word (a lockcore audit). Refused as one server given twice is; one cluster client
    beside plain nodes of other servers is still a node."""
    other = RedisCluster(host="127.0.0.1", port=cluster[1].port)  # another seed, same nodes
    try:
        with pytest.raises(ValueError, match="independent nodes"):
            lockcore.create("redlock", [client, other, client], "rl-cluster")
        with pytest.raises(ValueError, match="independent nodes"):
            lockcore.create("redlock", [client, redis.Redis(port=cluster[2].port)],
                            "rl-cluster")
    finally:
        other.close()
