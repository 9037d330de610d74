"""Fixtures for lockcore tests: a factory that builds any strategy on real servers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lockcore
from tests.support import missing_system_part


@pytest.fixture(scope="session")
def zookeeper_hosts() -> Iterator[str]:
    """A standalone ZooKeeper started for this session (Debian package ``zookeeper``)."""
    try:
        from lockcore.zkserver import ZooKeeperServer, ZooKeeperUnavailable
    except ImportError as exc:  # pragma: no cover - until the module exists
        missing_system_part(f"lockcore.zkserver not importable: {exc}")
        return
    try:
        server = ZooKeeperServer().start()
    except ZooKeeperUnavailable as exc:
        missing_system_part(str(exc))
        return
    try:
        yield server.hosts
    finally:
        # Close the strategy's shared kazoo clients first, or they log reconnect failures.
        from lockcore.strategies.zookeeper_clients import close_shared_clients

        close_shared_clients()
        server.stop()


LockFactory = Callable[..., lockcore.DistributedLock]


@pytest.fixture
def make_lock(request: pytest.FixtureRequest, redis_client: Any) -> LockFactory:
    """``make_lock(strategy, resource="res", **options)`` on the right real backend."""

    def factory(strategy: str, resource: Any = "res", **options: Any) -> lockcore.DistributedLock:
        if strategy == "redlock":
            backend = request.getfixturevalue("redlock_clients")
            # these tests are about the lock's behaviour, not its speed: a node that takes
            # more than the default 200 ms to answer on a loaded machine (a suite beside
            # other work) failed test_acquire_then_release (a mutation check's run)
            options.setdefault("node_timeout_ms", 2_000)
        elif strategy == "zookeeper":
            backend = request.getfixturevalue("zookeeper_hosts")
        elif strategy == "local":
            backend = None
        else:
            backend = redis_client
        if strategy == "multi" and isinstance(resource, str):
            resource = [resource, resource + ":b"]
        return lockcore.create(strategy, backend, resource, **options)

    return factory


@pytest.fixture
def client_without_client(redis_server: Any) -> Iterator[redis.Redis]:
    """A client of an ACL user refused the CLIENT command (``+@all -client``), as some
    managed Redis services set theirs up; the user is deleted afterwards."""
    admin = redis.Redis.from_url(redis_server.url)
    user = f"noclient-{uuid.uuid4().hex[:8]}"
    admin.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
                          "-client")
    client = redis.Redis(port=redis_server.port, username=user, password="pw")
    yield client
    client.close()
    admin.execute_command("ACL", "DELUSER", user)
    admin.close()
