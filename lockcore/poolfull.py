"""A client whose connection pool is used up: wait for a connection, do not fail.

redis-py's plain ``ConnectionPool`` raises ``MaxConnectionsError`` when every one of its
``max_connections`` is in use, before it sends anything. Sixteen threads sharing one
client on a pool of four (a lockcore audit): their tries used the connections up, so
acquires raised instead of waiting, and now and then a holder's ``release()`` raised
too. That lock stayed held for its whole TTL and every waiter timed out (``setnx``,
which has no TTL: held for good).

Nothing was sent, so the command can simply be run again once a connection is free:

* an acquire's try, or its wait, treats a full pool as "not this time" and goes on
  waiting within its ``timeout`` (``DistributedLock._acquire``);
* a release, and a waiter leaving a queue, run again for up to ``RELEASE_PATIENCE_S``:
  the connections are only lent for a command, so one is free again within moments.

A ``BlockingConnectionPool`` waits for a connection by itself (the shop uses one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import MaxConnectionsError

T = TypeVar("T")

#: how long a release (or leaving a queue) waits for a free connection
RELEASE_PATIENCE_S = 5.0
#: the longest pause between two looks at a full pool
MAX_PAUSE_S = 0.02

__all__ = ["MaxConnectionsError", "RELEASE_PATIENCE_S", "pause", "patiently"]


def pause(seconds: float = 0.005) -> None:
    """A short wait after a full pool, so a waiter does not spin on it."""
    time.sleep(min(seconds, MAX_PAUSE_S))


def patiently(call: Callable[[], T], patience_s: float = RELEASE_PATIENCE_S) -> T:
    """``call()``, run again while the pool is full (nothing was sent), up to
    ``patience_s``; then its ``MaxConnectionsError`` is raised."""
    deadline = time.monotonic() + patience_s
    wait = 0.001
    while True:
        try:
            return call()
        except MaxConnectionsError:
            if time.monotonic() >= deadline:
                raise
            pause(wait)
            wait = min(2 * wait, MAX_PAUSE_S)
