"""The locks under test: lockcore's strategies and the peer libraries, behind one shape.

Each contender builds a ``Handle`` with ``acquire(timeout) -> bool`` and ``release()``
from the connections of a worker process, so every library runs the same loop against
the same servers. Every lock gets the same 10 s expiry; everything else is each
library's default, because that is what its users get (redis-py's Lock polls every
100 ms, python-redis-lock blocks in BLPOP, pottery retries after a random 0-200 ms).
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

TTL_S = 10


class Handle(Protocol):
    def acquire(self, timeout: float) -> bool: ...

    def release(self) -> None: ...


class Connections(Protocol):
    """What a worker process owns: clients of the single Redis, the five, ZooKeeper."""

    def redis(self) -> Any: ...

    def redlock(self) -> list[Any]: ...

    def zookeeper(self) -> Any: ...


@dataclass(frozen=True)
class Contender:
    name: str
    library: str
    backend: str  # "redis" (one server), "redlock" (five), "zookeeper"
    settings: str
    build: Callable[[Connections, str], Handle]
    needs: str  # the module that must import for this contender to run
    #: no lock at all: the critical section is one Lua script (the baseline locks chase)
    lock_free: bool = False

    def unavailable(self) -> str | None:
        """Why this contender cannot run here (None if it can)."""
        try:
            importlib.import_module(self.needs)
        except ImportError as exc:
            return (f"{self.needs} not importable ({exc}); the peer libraries come with "
                    f"pip install -e '.[bench]'")
        return None


class Adapter:
    """Wraps a lock whose acquire takes ``timeout`` (lockcore, kazoo) or another name."""

    def __init__(self, lock: Any, acquire: Callable[[float], bool]) -> None:
        self.lock = lock
        self.acquire = acquire
        self.release: Callable[[], None] = lock.release


def _lockcore(strategy: str, backend: str, **options: Any) -> Callable[..., Handle]:
    def build(conns: Connections, name: str) -> Handle:
        import lockcore

        client = {"redis": conns.redis, "redlock": conns.redlock,
                  "zookeeper": conns.zookeeper}[backend]()
        lock = lockcore.create(strategy, client, name, ttl_ms=TTL_S * 1000, **options)
        return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, timeout=t)))
    return build


def _redis_py(conns: Connections, name: str) -> Handle:
    lock = conns.redis().lock(f"lock:{name}", timeout=TTL_S)  # sleep=0.1 by default
    return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, blocking_timeout=t)))


def _python_redis_lock(conns: Connections, name: str) -> Handle:
    import redis_lock

    lock = redis_lock.Lock(conns.redis(), name, expire=TTL_S)
    # It truncates timeout to whole seconds and reads 0 as "wait up to expire", so
    # round up: near the end of a run a worker may overstay by < 1 s, never by 10. And
    # it refuses a timeout above ``expire`` (TimeoutTooLarge: every worker of a run
    # longer than 10 s failed): a longer wait is several waits of at most ``expire``.
    def acquire(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if lock.acquire(timeout=min(TTL_S, max(1, math.ceil(left)))):
                return True
            if deadline - time.monotonic() <= 0:
                return False

    return Adapter(lock, acquire)


def _pottery(conns: Connections, name: str) -> Handle:
    from pottery import Redlock

    lock = Redlock(key=name, masters=set(conns.redlock()), auto_release_time=TTL_S)
    return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, timeout=t)))


class _NoLock:
    def acquire(self, timeout: float) -> bool:
        return True

    def release(self) -> None:
        pass


def _kazoo(conns: Connections, name: str) -> Handle:
    from kazoo.exceptions import LockTimeout

    lock = conns.zookeeper().Lock(f"/bench/{name}")

    def acquire(timeout: float) -> bool:
        try:  # kazoo raises on timeout where the others return False
            return bool(lock.acquire(blocking=True, timeout=timeout))
        except LockTimeout:
            return False
    return Adapter(lock, acquire)


CONTENDERS: list[Contender] = [
    Contender("token-poll", "lockcore", "redis", "wait=poll poll_ms=50",
              _lockcore("token", "redis", wait="poll"), "lockcore.strategies.token"),
    Contender("token-notify", "lockcore", "redis", "wait=notify",
              _lockcore("token", "redis", wait="notify"), "lockcore.strategies.token"),
    Contender("fair", "lockcore", "redis", "wait=notify, FIFO hand-off",
              _lockcore("fair", "redis", wait="notify"), "lockcore.strategies.fair"),
    Contender("redis-py", "redis-py", "redis", "redis.lock.Lock sleep=0.1",
              _redis_py, "redis.lock"),
    Contender("python-redis-lock", "python-redis-lock", "redis", "redis_lock.Lock (BLPOP)",
              _python_redis_lock, "redis_lock"),
    Contender("redlock", "lockcore", "redlock", "5 nodes",
              _lockcore("redlock", "redlock"), "lockcore.strategies.redlock"),
    Contender("pottery", "pottery", "redlock", "pottery.Redlock 5 masters",
              _pottery, "pottery"),
    Contender("zookeeper", "lockcore", "zookeeper", "wraps kazoo Lock",
              _lockcore("zookeeper", "zookeeper"), "kazoo.recipe.lock"),  # lockcore's wraps it
    Contender("kazoo", "kazoo", "zookeeper", "kazoo.recipe.lock.Lock",
              _kazoo, "kazoo.recipe.lock"),
    Contender("atomic", "webapp", "redis", "no lock: the storefront's atomic_purchase.lua",
              lambda conns, name: _NoLock(), "webapp.scripts", lock_free=True),
]


def by_name(names: list[str] | None = None, experimental: bool = False) -> list[Contender]:
    """The contenders named (default: all, with the experiments if asked for).

    :raises ValueError: for an unknown name.
    """
    from .experiments import EXPERIMENTS  # they build on this module

    if not names:
        return list(CONTENDERS) + (EXPERIMENTS if experimental else [])
    known = {c.name: c for c in CONTENDERS + EXPERIMENTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown contender(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(known)}")
    return [known[n] for n in names]
