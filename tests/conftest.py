"""Session-wide fixtures: our own redis-server processes, never a server we did not start."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from lockcore.embedded import EmbeddedRedis, RedisServer
from tests.support import FakeClock


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (``timeout``, ``kill``, a CI runner giving up) stops the run as Ctrl-C
    does: pytest then tears the fixtures down, and every server a test started is
    stopped by pid. Left at its default, SIGTERM ended pytest at once and orphaned them
    (a served shop: gunicorn and six redis-servers under init, found after a kill)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session, on a free loopback port."""
    with EmbeddedRedis(nodes=1) as cluster:
        yield cluster.servers[0]


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of our own server, flushed before each test (safe: we started it)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redlock_servers() -> Iterator[EmbeddedRedis]:
    """Five independent redis-server processes, as RedLock wants (for the session)."""
    with EmbeddedRedis(nodes=5) as cluster:
        yield cluster


@pytest.fixture
def redlock_cluster(redlock_servers: EmbeddedRedis) -> EmbeddedRedis:
    """The five nodes, each running: a previous test may have killed some. Only
    ``redlock_clients`` restarted them, and a test that took the cluster alone met the
    nodes an earlier test killed: three of five down, no majority, ``LockTimeout``
    (a fresh-clone CI run, in the order pytest-randomly drew)."""
    for server in redlock_servers.servers:
        server.start()  # a running one is left as it is
    return redlock_servers


@pytest.fixture
def redlock_clients(redlock_cluster: EmbeddedRedis) -> Iterator[list[redis.Redis]]:
    clients = [redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
               for url in redlock_cluster.urls]
    for client in clients:
        client.flushall()
    yield clients
    for client in clients:
        client.close()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def no_undo_outlives_its_test() -> Iterator[None]:
    """The shop's undo queues are per process (``webapp/retrylater.py``): an undo a test
    left behind (its Redis stopped) was tried by every later test's purchases, and at
    exit, against a server long gone."""
    yield
    from webapp.retrylater import QUEUES

    for queue in QUEUES:
        queue.waiting.clear()
        queue.next_drain = 0.0
