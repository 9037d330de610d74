"""RedLock's arithmetic and fan-out, apart from the lock so both can be tested alone.

* ``quorum(n)``: a majority, ``n // 2 + 1``. Two majorities of the same n always share
  a node, which is the whole argument for RedLock's safety (and for its fencing).
* ``validity_ms``: how long the lock can still be trusted once the votes are in:
  ``ttl - elapsed - drift`` with ``drift = ttl * 1% + 2 ms`` (the spec's clock-drift
  allowance for the servers' expiry clocks running at slightly different rates).
* ``JitterWaiter``: the spec's retry "after a random delay", so two clients that
  split the votes do not collide again in lockstep.
* ``until_sent``: ``on_every_node``, asking again the nodes whose pool had no free
  connection (below).
* ``on_every_node``: one command to every node *at once*: write it to all N sockets
  first (each node's lane, ``lockcore.wire``, if it has one), then read the N
  replies. The waits overlap as with a thread per node, without the thread
  hand-offs, which cost more CPU than the five round trips themselves
  (docs/performance.md, profile 4: 4x less client CPU, half the wall time).

**One deadline for all replies.** Each reply is read with what is left of
``timeout``, so a paused or partitioned node costs at most ``timeout`` in total, not
per node. A node that misses it is a "no", and its connection is *closed*, not
returned to the pool: its late reply would otherwise be read as the answer to the
next command sent on that socket. Connecting again counts against the same deadline,
and comes after the command is on its way to the nodes already connected: a frozen
node accepts the TCP connection and never answers the handshake, which cost its whole
timeout node after node, before the live nodes were even asked (a lockcore audit: 2
frozen of 5 made every acquire and release 400 ms, and releases raised
``LockNotOwned`` with the validity left). A node that timed out is then a "no" without
being asked for ``SUSPECT_S`` (unless that leaves fewer than a majority to ask), so a
frozen minority costs one deadline a second. The connects go one at a time, so each
node first gets a share of what is left (left / nodes still to connect), and those it
cut short share the rest: a frozen node first in the list took the whole deadline and
left each later node 1 ms to connect and handshake. Over a network no live node made it
in 1 ms: fresh clients with two frozen nodes of five first failed a try, two deadlines
with its release, on a healthy majority (a lockcore audit, the live nodes 10 ms away
behind a relay). Nodes that timed out before connect last. A new connection counts
against the deadline too: redis-py's pool connects the connections it hands
out, so the node lanes make theirs unconnected (``Lane(connect_later=True)``); clients
made while two nodes were frozen paid a whole node timeout each, one after the other.

**RedLock's own connections** (``node_lane``). Opening a connection goes through
redis-py's connect, which retries with the client's policy: redis-py 8.1's default
client retries a refused connection ten times with exponential backoff, 7-9 s for a
node that is down, and with no socket timeout its handshake waits for a frozen node forever. A
dead minority must be a quick "no", or the time spent eats the validity and the
majority never wins (a contract audit: 3 live nodes of 5, ``acquire`` 9.1 s, release
9.2 s; with ``ttl_ms=3000`` never). So the connections to each node come from a pool
of lockcore's own, whatever the client's pool (a small one, a blocking one) or class,
made with the client's settings but one connection attempt, and
connect and socket timeouts no longer than the node timeout. They close when the
client is garbage collected, not with ``client.close()``.

**A full pool is "not sent", not "no"** (``until_sent``). That pool has the client's
``max_connections``, and keeps a lane of a quarter of them (at least one, at most
``LANE_SIZE``): with one or two connections per node, threads sharing the clients met
``MaxConnectionsError``
before anything was sent. It was that node's answer: a release counted the node as
not released, raised ``LockNotOwned("released on only 1 of 3 nodes")``, and left the
keys held for their whole TTL (a lockcore audit: 8 threads on pools of one). Nothing
was sent, so the node is asked again once the others' calls have given their
connections back, within a patience the caller picks: a release waits as long as
every release does for a free connection (``poolfull.RELEASE_PATIENCE_S``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import random
import socket
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from ..poolfull import MAX_PAUSE_S, MaxConnectionsError, pause
from ..wire import LANE_SIZE, Lane

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
    """``ValueError`` if two clients name the same server (host and port, or socket),
    under one name or two (``localhost`` and ``127.0.0.1``: the addresses a host name
    resolves to, looked up once per process; a name that does not resolve is compared
    as written).

    One server counted as several nodes is one vote wearing several hats: three
    clients of one server never won a majority of five, and with five they would let a
    single crash free the lock everywhere.
    """
    seen: dict[tuple[Any, ...], str] = {}
    for client in clients:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
        if not isinstance(kwargs, dict):
            nodes = _cluster_nodes(client)
            if nodes is None:
                continue  # not a plain client (a stand-in): nothing to compare
            # a cluster client is one node of five, whatever its masters: five clients
            # of one cluster were taken as five nodes, and acquire said False for ever
            # without a word (a lockcore audit)
            where = "the cluster of " + ", ".join(f"{h}:{p}" for h, p in sorted(nodes)[:3])
            names = set(nodes).union(*(_addresses(h, p) for h, p in nodes))
            _check_unseen(names, where, seen)
            continue
        path, host, port = kwargs.get("path"), kwargs.get("host"), kwargs.get("port")
        # as redis-py connects: no host is localhost, no port 6379, a query's port a
        # string (redis://?host=h&port=6399 beside redis://h:6399 was two nodes; a review)
        host, port = host or "localhost", port or 6379
        with contextlib.suppress(TypeError, ValueError):
            port = int(port)
        where = path or f"{host}:{port}"
        # a socket's path as the file it names: "/d/./u.sock" and "/d/u.sock" are one
        # server (accepted as two: two votes of three; a lockcore audit)
        names = {("unix", os.path.realpath(path))} if path else \
            {(host, port), *_addresses(host, port)}
        _check_unseen(names, where, seen)


def _check_unseen(names: set[tuple[Any, ...]], where: str,
                  seen: dict[tuple[Any, ...], str]) -> None:
    """``ValueError`` if a node of ``names`` was seen already; else they are seen now."""
    for name in names:
        if name in seen:
            twice = "is given twice" if seen[name] == where else \
                f"and {seen[name]} are one server ({name[0]}:{name[1]})"
            raise ValueError(f"redlock needs independent nodes; {where} {twice}")
    seen.update(dict.fromkeys(names, where))


def _cluster_nodes(client: Any) -> set[tuple[str, Any]] | None:
    """The (host, port) of each node a ``RedisCluster`` client knows; None for any other
    client."""
    get_nodes = getattr(client, "get_nodes", None)
    if not callable(get_nodes):
        return None
    try:
        return {(str(node.host), int(node.port)) for node in get_nodes()}
    except (AttributeError, TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _addresses(host: Any, port: Any) -> frozenset[tuple[str, Any]]:
    """The addresses ``host`` resolves to, with ``port``; none if it does not resolve
    (then its name alone is compared)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, TypeError, ValueError):
        return frozenset()
    return frozenset((str(info[4][0]), port) for info in found)


def until_sent(clients: Sequence[Any], command: Sequence[Any], call: Callable[[Any], Any],
               timeout: float, patience_s: float) -> list[Any]:
    """``on_every_node``; the nodes whose pool had no free connection (nothing sent) are
    asked again, alone, until ``patience_s`` has passed; then their ``MaxConnectionsError``
    stays their answer. Between two rounds this thread holds no connection, so threads
    waiting on each other's nodes cannot block one another."""
    answers = on_every_node(clients, command, call, timeout)
    deadline = time.monotonic() + patience_s
    wait = 0.001
    while True:
        unsent = [node for node, a in enumerate(answers) if isinstance(a, MaxConnectionsError)]
        if not unsent or time.monotonic() >= deadline:
            return answers
        pause(wait)
        wait = min(2 * wait, MAX_PAUSE_S)
        again = on_every_node([clients[node] for node in unsent], command, call, timeout)
        for node, answer in zip(unsent, again, strict=True):
            answers[node] = answer


def on_every_node(clients: Sequence[Any], command: Sequence[Any], call: Callable[[Any], Any],
                  timeout: float) -> list[Any]:
    """Send ``command`` to every node, then read every reply; each reply or its exception.

    Nodes with a connection open get the command first; nodes that need one connect
    after, each within a share of what is left of ``timeout`` (the module docstring),
    so the replies of the first are waiting when they are read. A node that timed out
    lately is a "no" without a try (``SUSPECT_S``).

    :param call: the same command through the client's own API. Used to retry after
        NOSCRIPT (a node restarted and lost its scripts: the client loads them again),
        and for stand-ins that are not ``redis.Redis`` clients (unit tests' mocks).
    """
    now = time.monotonic()
    deadline = now + timeout
    results: list[Any] = [None] * len(clients)
    sent: list[tuple[int, Any, Any]] = []
    unconnected: list[tuple[int, Any, Any]] = []
    quiet = _quiet_nodes(clients, now)
    timed_out: list[Any] = []  # marked suspect together, at the end
    for node, client in enumerate(clients):
        if not isinstance(client, redis.Redis):
            results[node] = _attempt(call, client)
            continue
        if node in quiet:
            results[node] = NodeTimeout(f"node {node} timed out {quiet[node]:.1f}s ago: "
                                        "a 'no' until it is tried again")
            continue
        source = _Connections(client, timeout)
        try:  # the lane's new connections come unconnected; the pool's connect here
            conn = source.take()
        except Exception as exc:  # down: refused at once (or the connect timeout)
            if isinstance(exc, redis.TimeoutError):
                timed_out.append(client)
            results[node] = exc
            continue
        if getattr(conn, "_sock", None) is None:
            unconnected.append((node, source, conn))
            continue
        _send(node, source, conn, command, results, sent)
    # after the others' commands are on their way. One connect at a time: each node first
    # gets a share of what is left, then those it cut short share the rest; a node that
    # timed out before goes last
    unconnected.sort(key=lambda item: clients[item[0]] in _suspects)
    share = timeout / max(len(unconnected), 1)
    had = dict.fromkeys((node for node, _source, _conn in unconnected), 0.0)
    for last_pass in (False, True):
        missed = []
        for turn, (node, source, conn) in enumerate(unconnected):
            given = max((deadline - time.monotonic()) / (len(unconnected) - turn), 0.001)
            had[node] += given
            try:
                _connect_within(conn, given)
            except redis.TimeoutError as exc:
                if not last_pass and given < _longest_wait(conn):  # we cut it short
                    missed.append((node, source, conn))
                    continue
                source.give_back(conn)
                if had[node] >= share / 2:  # not when a stall of ours left it no real chance
                    timed_out.append(clients[node])
                results[node] = NodeTimeout(f"node {node} did not let us connect in time: {exc}")
                continue
            except Exception as exc:
                source.give_back(conn)
                results[node] = exc
                continue
            _send(node, source, conn, command, results, sent)
        unconnected = missed
    for node, source, conn in sent:
        try:
            left = max(deadline - time.monotonic(), 0.001)
            # On a timeout redis-py closes the socket, so a late reply is never misread.
            results[node] = conn.read_response(timeout=left)
            _suspects.pop(clients[node], None)
        except redis.TimeoutError:
            timed_out.append(clients[node])
            results[node] = NodeTimeout(f"node {node} gave no answer within {timeout}s")
        except Exception as exc:
            results[node] = exc
        finally:
            source.give_back(conn)
    # one instant for every node that timed out in this call: marked as each timed out
    # (the second a millisecond after the first, with what the first left it), they fell
    # due again apart, and a call in between asked one frozen node, the next call the
    # other: a frozen minority cost two deadlines a second, not one (a lockcore audit)
    stamp = time.monotonic()
    for client in timed_out:
        _suspects[client] = stamp
    for node, result in enumerate(results):
        if isinstance(result, NoScriptError):
            results[node] = _attempt(call, clients[node])
        if isinstance(results[node], Exception):
            logger.debug("redlock node %d failed: %r", node, results[node])
            if _refused(results[node]):
                _tell_refused(clients[node], node, results[node])
    return results


#: per client: the refusal already logged for it (a node that refuses every command)
_told: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _refused(error: BaseException) -> bool:
    """An answer that no retry changes: a wrong password, or a user not allowed the
    commands (unlike a node down or slow, which comes back)."""
    if isinstance(error, (redis.AuthenticationError, redis.exceptions.NoPermissionError)):
        return True
    said = str(error)
    return isinstance(error, redis.ResponseError) and (
        said.startswith(("NOPERM", "WRONGPASS", "NOAUTH")) or "can't run this command" in said)


def _tell_refused(client: Any, node: int, error: BaseException) -> None:
    """A WARNING, once per client and kind of refusal: such a node is a "no" at every
    acquire, and one of five quietly left a majority with one node to spare, not two
    (a lockcore audit: nothing said it, even at WARNING)."""
    kind = type(error).__name__
    try:
        if _told.get(client) == kind:
            return
        _told[client] = kind
    except TypeError:  # a stand-in that cannot be weakly referenced: say it each time
        pass
    logger.warning("redlock node %d refuses lockcore's commands (%s: %s): it counts as a "
                   "'no' at every acquire until fixed", node, kind, str(error)[:160])


#: how long a node that timed out is a "no" without being asked. A frozen node (a
#: paused process, a partition that drops packets) cost every call its whole timeout,
#: and release again; one try a second keeps that off the other calls.
SUSPECT_S = 1.0

#: per client: when its node last timed out (kept until it answers again)
_suspects: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _quiet_nodes(clients: Sequence[Any], now: float) -> dict[int, float]:
    """The nodes not to ask now (index -> seconds since they timed out): those that
    timed out within ``SUSPECT_S``, unless that would leave fewer than a majority to
    ask (a stall of this process can time out live nodes too)."""
    quiet = {}
    for node, client in enumerate(clients):
        try:
            since = _suspects.get(client)
        except TypeError:  # a stand-in that cannot be weakly referenced
            continue
        if since is not None and now - since < SUSPECT_S:
            quiet[node] = now - since
    return quiet if len(clients) - len(quiet) >= quorum(len(clients)) else {}


def _send(node: int, source: _Connections, conn: Any, command: Sequence[Any],
          results: list[Any], sent: list[tuple[int, Any, Any]]) -> None:
    try:
        conn.send_command(*command)
    except Exception as exc:
        source.give_back(conn)
        results[node] = exc
        return
    sent.append((node, source, conn))


def _connect_within(conn: Any, left: float) -> None:
    """Connect ``conn`` (and its handshake) within ``left`` seconds: a frozen node
    accepts the TCP connection and never answers the handshake, which waited the whole
    socket timeout, node after node."""
    timeouts = conn.socket_connect_timeout, conn.socket_timeout
    conn.socket_connect_timeout = min(left, timeouts[0] or left)
    conn.socket_timeout = min(left, timeouts[1] or left)
    try:
        conn.connect()
    finally:
        conn.socket_connect_timeout, conn.socket_timeout = timeouts
        sock = getattr(conn, "_sock", None)
        if sock is not None:
            sock.settimeout(timeouts[1])


def _longest_wait(conn: Any) -> float:
    """How long ``conn`` may take to connect by its own settings: a node that had all of
    it in the first pass is not tried again (at most the client's timeout, as before)."""
    return max(conn.socket_connect_timeout or math.inf, conn.socket_timeout or math.inf)


class _Connections:
    """Where a node's connection comes from: RedLock's own lane to it (``node_lane``) if
    the client allows one, else its pool (whose checkout also polls the socket)."""

    def __init__(self, client: Any, timeout: float) -> None:
        self.lane = node_lane(client, timeout)
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


#: per client, per node timeout: RedLock's own lane to that node (``node_lane``)
_node_lanes: weakref.WeakKeyDictionary[Any, dict[float, Lane]] = weakref.WeakKeyDictionary()


def node_lane(client: Any, timeout: float) -> Lane | None:
    """A lane (``lockcore.wire``) to ``client``'s node on a pool of RedLock's own: the
    client's connection settings, but no retry of a failed connect, and connect and
    socket timeouts of at most ``timeout`` (the module docstring says why). None only
    for a pool that is no ``redis.ConnectionPool``: that keeps its own path.

    Also for the clients ``wire.lane`` gives no lane (a pool of fewer than 4, a
    subclass, a ``BlockingConnectionPool``): those connected through their own pool,
    with the client's retries and timeouts. On pools of two a dead node cost 7 s a
    call, and a frozen one's handshake waited for ever (a lockcore audit). A blocking
    pool's waiting is not lost: a node whose own pool is full is asked again
    (``until_sent``)."""
    try:  # every node of every RedLock call comes here: the common case first
        found = _node_lanes.get(client, {}).get(timeout)
    except TypeError:  # cannot be weakly referenced: no lane (as ``wire.lane`` says)
        return None
    if found is None:
        pool = client.connection_pool
        if not isinstance(pool, redis.ConnectionPool):  # a blocking pool is one
            return None
        lanes = _node_lanes.setdefault(client, {})
        kwargs = dict(pool.connection_kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        for key in ("socket_connect_timeout", "socket_timeout"):
            given = kwargs.get(key)
            kwargs[key] = timeout if given is None else min(given, timeout)
        own = redis.ConnectionPool(connection_class=pool.connection_class,
                                   max_connections=pool.max_connections, **kwargs)
        # closed with the client's last reference: left to the garbage collector, its
        # sockets were "ResourceWarning: unclosed socket" (seen in a test run)
        weakref.finalize(client, own.disconnect)
        # at least one: a lane's new connections come unconnected, to connect within
        # the call's deadline (a borrowed one connects at the checkout, node by node)
        size = max(1, min(LANE_SIZE, pool.max_connections // 4))
        found = lanes[timeout] = Lane(own, size, connect_later=True)
    return found


class JitterWaiter:
    """Retry after ``poll_ms`` +-50%: the spec's random delay against split votes."""

    name = "jitter"

    def __init__(self, poll_ms: float) -> None:
        self.interval = poll_ms / 1000

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        delay = self.interval * random.uniform(0.5, 1.5)
        lock.clock.sleep(delay if remaining is None else min(delay, remaining))
