"""RedLock's arithmetic and fan-out, apart from the lock so both can be tested alone.

* ``quorum(n)``: a majority, ``n // 2 + 1``. Two majorities of the same n always share
  a node, which is the whole argument for RedLock's safety (and for its fencing).
* ``validity_ms``: how long the lock can still be trusted once the votes are in:
  ``ttl - elapsed - drift`` with ``drift = ttl * 1% + 2 ms`` (the spec's clock-drift
  allowance for the servers' expiry clocks running at slightly different rates).
* ``JitterWaiter``: the spec's retry "after a random delay", so two clients that
  split the votes do not collide again in lockstep.
* ``on_every_node``: run one call per node *in parallel* and wait at most
  ``timeout`` seconds. A sequential loop would let five 50 ms nodes eat 250 ms of
  the TTL; in parallel the cost is the slowest node we wait for.

The pool is a plain ``ThreadPoolExecutor`` created on first use, so in a process that
gevent has monkey-patched before that (gunicorn's gevent worker, Locust) its "threads"
are greenlets and the calls still overlap.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..base import DistributedLock

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_WORKERS = 64

_pool: ThreadPoolExecutor | None = None
_pool_guard = threading.Lock()


def quorum(nodes: int) -> int:
    """The smallest majority of ``nodes``."""
    return nodes // 2 + 1


def drift_ms(ttl_ms: int) -> float:
    return ttl_ms * 0.01 + 2


def validity_ms(ttl_ms: int, elapsed_ms: float) -> float:
    """Milliseconds the lock stays trustworthy after ``elapsed_ms`` spent acquiring it."""
    return ttl_ms - elapsed_ms - drift_ms(ttl_ms)


class NodeTimeout(Exception):
    """The node did not answer within the per-node timeout (counted as a 'no')."""


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_guard:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="redlock")
        return _pool


def on_every_node(clients: Sequence[Any], call: Callable[[Any], T],
                  timeout: float) -> list[T | BaseException]:
    """``call(client)`` for every client at once; each result or the exception it raised.

    A node slower than ``timeout`` gets ``NodeTimeout``; its call keeps running in the
    background (a late SET there expires with its TTL and is freed by our release).
    """
    futures = [_executor().submit(call, client) for client in clients]
    wait_for(futures, timeout=timeout)
    results: list[T | BaseException] = []
    for node, future in enumerate(futures):
        if not future.done():
            results.append(NodeTimeout(f"node {node} gave no answer within {timeout}s"))
            continue
        error = future.exception()
        if error is not None:
            logger.debug("redlock node %d failed: %r", node, error)
            results.append(error)
        else:
            results.append(future.result())
    return results


class JitterWaiter:
    """Retry after ``poll_ms`` +-50%: the spec's random delay against split votes."""

    name = "jitter"

    def __init__(self, poll_ms: float) -> None:
        self.interval = poll_ms / 1000

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        delay = self.interval * random.uniform(0.5, 1.5)
        lock.clock.sleep(delay if remaining is None else min(delay, remaining))
