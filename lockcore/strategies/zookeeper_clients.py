"""One started ``KazooClient`` per hosts string, shared by this process's locks.

A ZooKeeper session costs a TCP connection, a server-side session and a heartbeat
thread; opening one per lock handle (the web app builds a handle per request) would
swamp the server. The clients are stopped at exit, or by ``close_shared_clients()``.

Starting one waits for its first connection (up to ``START_TIMEOUT_S``). Each hosts
string starts on its own, so an unreachable ensemble holds up only the callers that
asked for it, not every lock in the process; a caller that arrives while its hosts are
starting shares that start's outcome instead of queueing a second one behind it.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

ZK_TIMEOUT_S = 10.0
#: the longest wait between reconnection attempts after an outage (kazoo's default
#: doubles up to an hour: 16.5 s to come back after a 70 s outage, longer after longer)
RECONNECT_MAX_S = 2.0
#: how long ``shared_client`` waits for a new client's first connection (kazoo's default)
START_TIMEOUT_S = 15.0

_shared: dict[str, Any] = {}
_starting: dict[str, Future[Any]] = {}  # hosts -> the start in progress
_shared_guard = threading.Lock()  # guards the two dicts; never held while connecting
#: the process the clients above belong to (``_forget_after_fork``)
_owner_pid = os.getpid()


def _forget_after_fork() -> None:
    """In a child after ``fork`` (multiprocessing's fork, ``gunicorn --preload``): the
    parent's clients are copies whose threads did not come along. One still said
    ``connected`` and never answered: ``acquire(timeout=2)`` on a free lock returned
    False, and without a timeout hung for good (an outside audit). The child forgets
    them, without stopping them (that would close the parent's session), and starts
    its own; a start the parent had under way is not the child's either."""
    global _shared, _starting, _shared_guard, _owner_pid
    _shared, _starting, _shared_guard = {}, {}, threading.Lock()
    _owner_pid = os.getpid()


os.register_at_fork(after_in_child=_forget_after_fork)


@functools.lru_cache(maxsize=64)  # the web app makes a handle per purchase
def hosts_problem(hosts: str) -> str | None:
    """What is wrong with ``hosts`` as a hosts string (``host:port,...[/chroot]``) that
    kazoo reads, or None. kazoo's own words named no argument ("bad hostname" for a
    blank item, "Port could not be cast to integer value as ':x'"), and read
    ``zk://host:2181`` as a host named ``zk``."""
    from kazoo.hosts import collect_hosts

    if "://" in hosts:
        return "give host:port pairs, not a URL"
    try:
        servers, _chroot = collect_hosts(hosts)
    except ValueError as exc:
        return str(exc)
    if not servers or not all(host for host, _port in servers):
        return "bad hostname"  # a blank item: kazoo takes it for a host named ''
    return None


def shared_client(hosts: str) -> Any:
    """One started client per hosts string: a ZooKeeper session is too dear per lock.

    Raises kazoo's ``ConnectionLoss`` naming ``hosts`` if none answers in time."""
    with _shared_guard:
        client = _shared.get(hosts)
        if client is not None:
            return client
        underway = _starting.get(hosts)
        if underway is None:
            start = _starting[hosts] = Future()
    if underway is not None:  # someone is starting it: share their outcome
        return underway.result()
    try:
        client = _start(hosts)
    except BaseException as exc:
        with _shared_guard:
            del _starting[hosts]
        start.set_exception(exc)
        raise
    with _shared_guard:
        _shared[hosts] = client
        del _starting[hosts]
    start.set_result(client)
    return client


def reconnect_retry(sleep_func: Callable[[float], Any] = time.sleep) -> Any:
    """kazoo's connection retry, with waits capped at ``RECONNECT_MAX_S``: for every
    client of this project (the shared ones here, the web app's per worker).
    ``sleep_func`` must be the client's handler's (gevent's, under gevent)."""
    from kazoo.retry import KazooRetry

    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_S,
                      sleep_func=sleep_func)


def _start(hosts: str) -> Any:
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionLoss

    client = KazooClient(hosts=hosts, timeout=ZK_TIMEOUT_S, connection_retry=reconnect_retry())
    try:
        client.start(timeout=START_TIMEOUT_S)  # stops and closes itself on failure
    except client.handler.timeout_exception:
        raise ConnectionLoss(f"no ZooKeeper answered at {hosts!r} within "
                             f"{START_TIMEOUT_S:g}s") from None
    return client


def close_shared_client(hosts: str) -> None:
    """Stop the client ``shared_client`` started for ``hosts``, if any (its ensemble is
    gone for good: it would go on reconnecting every ``RECONNECT_MAX_S``)."""
    with _shared_guard:
        client = _shared.pop(hosts, None)
    if client is not None:
        client.stop()
        client.close()


@atexit.register
def close_shared_clients() -> None:
    """Stop the clients ``shared_client`` started (at exit, or when their server goes)."""
    with _shared_guard:
        every = list(_shared)
    for hosts in every:
        close_shared_client(hosts)
