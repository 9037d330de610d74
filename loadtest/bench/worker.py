"""One benchmark worker process: build a contender's lock, wait for the start, run the loop.

Workers are separate processes (``spawn``), not threads, as gunicorn workers or service
instances would be: eight threads would share one GIL and partly measure it. Every
worker builds its own clients, warms up (connects, loads Lua scripts) and says
"ready"; the parent then takes the ``INFO commandstats`` snapshot and sends one
wall-clock start and end time to all of them, so they begin together.

The critical section is the flash sale's: GET the stock, DECR it. If DECR does not
return GET - 1, someone else decremented in between, and the overlap is counted: a
benchmark of a lock that does not exclude would be meaningless.
"""

from __future__ import annotations

import logging
import resource
import signal
import time
from multiprocessing.queues import Queue
from typing import Any

import redis

from lockcore.lifeline import die_with_parent
from webapp.logthrottle import quiet_kazoo

from .contenders import Connections, by_name
from .counting import ROUND_TRIPS, counting_client


class WorkerConnections(Connections):
    """Clients built on first use and kept for the worker's life."""

    def __init__(self, backends: dict[str, Any]) -> None:
        self.backends = backends
        self._redis: Any = None
        self._redlock: list[Any] | None = None
        self._zk: Any = None

    def redis(self) -> Any:
        if self._redis is None:
            self._redis = counting_client(self.backends["redis"])
        return self._redis

    def redlock(self) -> list[Any]:
        if self._redlock is None:
            self._redlock = [counting_client(url) for url in self.backends["redlock"]]
        return self._redlock

    def zookeeper(self) -> Any:
        if self._zk is None:
            from kazoo.client import KazooClient

            self._zk = KazooClient(hosts=self.backends["zookeeper"], timeout=10)
            self._zk.start(timeout=30)
        return self._zk

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()


class _Stopped(Exception):
    """The parent sent the stop while this worker waited for its window."""


def serve(index: int, commands: Queue[Any], results: Queue[Any],
          parent_pid: int | None = None, via_server: bool = False) -> None:
    """Run specs from ``commands`` until it yields None; killed with the process that
    started it (``parent_pid``; None: not tied), or (``via_server``) with the fork
    server that forked it, which ends with the bench."""
    if via_server:
        die_with_parent(None)
        _let_the_fork_server_go()
    elif parent_pid is not None:
        die_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group: the parent stops us (pool.py), and a
    # KeyboardInterrupt traceback from each of eight workers would only be noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker still waiting when the window closes times out on purpose; lockcore's
    # "gave up" warning would only be noise on the benchmark's terminal.
    logging.getLogger("lockcore").setLevel(logging.ERROR)
    # kazoo's reconnect loop logs a line a second while ZooKeeper is down (57 in one
    # run; a bench audit): once a minute, with the count
    quiet_kazoo()
    connections: dict[str, WorkerConnections] = {}
    while (spec := commands.get()) is not None:
        key = repr(sorted(spec["backends"].items()))
        conns = connections.setdefault(key, WorkerConnections(spec["backends"]))
        try:
            run(index, spec, conns, commands, results)
        except _Stopped:  # the parent stops us where the window would have come
            break
        except Exception as exc:  # reported to the parent, which records it per contender
            # and prints it under the table: a traceback per worker here only repeated
            # it (a bench audit: three of them for a ZooKeeper killed mid-run)
            results.put({"worker": index, "error": f"{type(exc).__name__}: {exc}"})
    for conns in connections.values():
        conns.close()


def _let_the_fork_server_go() -> None:
    """Close this worker's copy of the fork server's "alive" pipe: the server exits when
    every copy is closed, the bench's included, and only then does this worker get the
    death signal it is tied to the server with. Kept open, a SIGKILLed bench left the
    server and its workers running (a review)."""
    import os
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def run(index: int, spec: dict[str, Any], conns: WorkerConnections,
        commands: Queue[Any], results: Queue[Any]) -> None:
    contender = by_name([spec["contender"]])[0]
    handle = contender.build(conns, spec["lock_name"])
    stock = redis.Redis.from_url(spec["backends"]["redis"])  # not counted: not the lock's
    stock.ping()
    if handle.acquire(5.0):  # warm-up: connect, load scripts, create parent znodes
        handle.release()
    purchase = _atomic_purchase(conns.redis()) if contender.lock_free else None
    # stock, sold-out flag, sale generation (unchecked: the bench resets nothing)
    keys = [spec["stock_key"], spec["stock_key"] + ":soldout", spec["stock_key"] + ":gen"]
    results.put({"worker": index, "ready": True})
    window = commands.get()
    if window is None:  # the stop (Ctrl-C, SIGTERM): it was a TypeError traceback
        raise _Stopped
    start, end = window["start"], window["end"]
    time.sleep(max(0.0, start - time.time()))
    sent_before = ROUND_TRIPS.value
    cpu_before = time.process_time()
    switches_before = context_switches()
    acquisitions = overlaps = trips = 0
    waits: list[float] = []
    contended = spec["mode"] == "contended"
    while (now := time.time()) < end:
        began = time.perf_counter()
        if not handle.acquire(end - now):
            continue
        waited = time.perf_counter() - began
        in_window = time.time() < end  # a late acquisition is released and not counted
        if purchase is not None and in_window:
            purchase(keys=keys, args=[1, 1, ""])  # the whole purchase, atomically, no lock
        elif contended and in_window:
            overlaps += critical_section(stock, spec["stock_key"])
        handle.release()
        if in_window:
            acquisitions += 1
            trips = ROUND_TRIPS.value - sent_before  # a late acquisition's trips drop out
            if contended and purchase is None:  # a lock-free purchase waits for nothing
                waits.append(waited)
    cpu = time.process_time() - cpu_before
    switches = context_switches() - switches_before
    stock.close()
    results.put({"worker": index, "acquisitions": acquisitions, "overlaps": overlaps,
                 "waits": waits, "round_trips": trips, "cpu_s": cpu, "switches": switches})


def context_switches() -> int:
    """How often this process has been switched out so far: it blocked (a socket read, a
    sleep) or the scheduler preempted it. Each switch back in costs CPU of its own."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def critical_section(stock: Any, key: str) -> bool:
    """GET then DECR the stock; True when someone else decremented in between (overlap)."""
    before = int(stock.get(key) or 0)
    return bool(stock.decr(key) != before - 1)


def _atomic_purchase(client: Any) -> Any:
    """The storefront's lock-free purchase, imported (slow: Flask) before the window opens."""
    from webapp import scripts

    return scripts.script(client, "atomic_purchase")
