"""RedLock's arithmetic and fan-out, apart from the lock so both can be tested alone.

* ``quorum(n)``: a majority, ``n // 2 + 1``. Two majorities of the same n always share
  a node, which is the whole argument for RedLock's safety (and for its fencing).
* ``validity_ms``: how long the lock can still be trusted once the votes are in:
  ``ttl - elapsed - drift`` with ``drift = ttl * 1% + 2 ms`` (the spec's clock-drift
  allowance for the servers' expiry clocks running at slightly different rates).
* ``JitterWaiter``: the spec's retry "after a random delay", so two clients that
  split the votes do not collide again in lockstep.
* ``on_every_node``: one command to every node *at once*: write it to all N sockets
  first (each node's lane, ``lockcore.wire``, if it has one), then read the N
  replies. The waits overlap as with a thread per node, without the thread
  hand-offs, which cost more CPU than the five round trips themselves
  (docs/performance.md, profile 4: 4x less client CPU, half the wall time).

**One deadline for all replies.** Each reply is read with what is left of
``timeout``, so a paused or partitioned node costs at most ``timeout`` in total, not
per node. A node that misses it is a "no", and its connection is *closed*, not
returned to the pool: its late reply would otherwise be read as the answer to the
next command sent on that socket. Opening a connection is bounded by the client's own
``socket_connect_timeout`` (refused at once when a node is down), so give RedLock
clients short socket timeouts.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.exceptions import NoScriptError

from ..wire import lane

if TYPE_CHECKING:
    from ..base import DistributedLock

logger = logging.getLogger(__name__)


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


def _attempt(call: Callable[[Any], Any], client: Any) -> Any:
    try:
        return call(client)
    except Exception as exc:
        return exc


def check_independent(clients: Sequence[Any]) -> None:
    """``ValueError`` if two clients name the same server (host and port, or socket).

    One server counted as several nodes is one vote wearing several hats: three
    clients of one server never won a majority of five, and with five they would let a
    single crash free the lock everywhere. Two names of one address (``localhost`` and
    ``127.0.0.1``) are not caught.
    """
    seen: set[tuple[Any, ...]] = set()
    for client in clients:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
        if not isinstance(kwargs, dict):
            continue  # not a plain client (a stand-in): nothing to compare
        address = (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"))
        if address in seen:
            where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
            raise ValueError(f"redlock needs independent nodes; {where} is given twice")
        seen.add(address)


def on_every_node(clients: Sequence[Any], command: Sequence[Any], call: Callable[[Any], Any],
                  timeout: float) -> list[Any]:
    """Send ``command`` to every node, then read every reply; each reply or its exception.

    :param call: the same command through the client's own API. Used to retry after
        NOSCRIPT (a node restarted and lost its scripts: the client loads them again),
        and for stand-ins that are not ``redis.Redis`` clients (unit tests' mocks).
    """
    deadline = time.monotonic() + timeout
    results: list[Any] = [None] * len(clients)
    sent: list[tuple[int, Any, Any]] = []
    for node, client in enumerate(clients):
        if not isinstance(client, redis.Redis):
            results[node] = _attempt(call, client)
            continue
        source = _Connections(client)
        try:
            conn = source.take()
        except Exception as exc:  # down: refused at once (or the connect timeout)
            results[node] = exc
            continue
        try:
            conn.send_command(*command)
        except Exception as exc:
            source.give_back(conn)
            results[node] = exc
            continue
        sent.append((node, source, conn))
    for node, source, conn in sent:
        try:
            left = max(deadline - time.monotonic(), 0.001)
            # On a timeout redis-py closes the socket, so a late reply is never misread.
            results[node] = conn.read_response(timeout=left)
        except redis.TimeoutError:
            results[node] = NodeTimeout(f"node {node} gave no answer within {timeout}s")
        except Exception as exc:
            results[node] = exc
        finally:
            source.give_back(conn)
    for node, result in enumerate(results):
        if isinstance(result, NoScriptError):
            results[node] = _attempt(call, clients[node])
        if isinstance(results[node], Exception):
            logger.debug("redlock node %d failed: %r", node, results[node])
    return results


class _Connections:
    """Where a node's connection comes from: the client's lane (``lockcore.wire``) if it
    has one, else its pool (whose checkout also polls the socket)."""

    def __init__(self, client: Any) -> None:
        self.lane = lane(client)
        self.pool = client.connection_pool
        self.ours = False

    def take(self) -> Any:
        if self.lane is None:
            return self.pool.get_connection()
        connection, self.ours = self.lane.take()
        return connection

    def give_back(self, connection: Any) -> None:
        if self.lane is None:
            self.pool.release(connection)
        else:
            self.lane.give_back(connection, self.ours)


class JitterWaiter:
    """Retry after ``poll_ms`` +-50%: the spec's random delay against split votes."""

    name = "jitter"

    def __init__(self, poll_ms: float) -> None:
        self.interval = poll_ms / 1000

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        delay = self.interval * random.uniform(0.5, 1.5)
        lock.clock.sleep(delay if remaining is None else min(delay, remaining))
