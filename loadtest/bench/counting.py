"""Two ways of counting what a lock costs Redis, because they answer different questions.

* **Round trips** (client side): every request written to the socket, counted by a
  ``redis.Connection`` subclass. A pipeline is one round trip, an EVALSHA is one no
  matter how many commands its script runs. This is the latency a lock pays.
* **Commands** (server side): the delta of ``INFO commandstats`` calls. Redis counts the
  commands a Lua script runs as well as the EVALSHA itself, so a one-round-trip script
  that does SET + INCR shows up as three commands. This is the work Redis does.

Neither needs MONITOR, which would itself cost more than the locks being measured.

A third figure, **CPU per acquisition** (the workers' ``process_time``, the servers'
``used_cpu_user + used_cpu_sys`` and our ZooKeeper JVM's utime + stime), matters most
on a small machine: with eight workers and Redis on two cores the run is CPU-bound, so
throughput is roughly the cores divided by the CPU every acquisition costs everyone,
including the waiters that woke for nothing. It is also the figure least disturbed by
other load on a shared machine.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

import redis


class _RoundTrips:
    """A process-wide counter; pottery sends from a thread pool, hence the lock."""

    def __init__(self) -> None:
        self._value = 0
        self._mutex = threading.Lock()

    def add(self) -> None:
        with self._mutex:
            self._value += 1

    @property
    def value(self) -> int:
        return self._value


ROUND_TRIPS = _RoundTrips()


class CountingConnection(redis.Connection):
    """A redis-py connection that counts each request it sends."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        ROUND_TRIPS.add()
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_client(url: str, **options: Any) -> redis.Redis:
    """A client of ``url`` whose round trips land in ``ROUND_TRIPS``."""
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection, **options)
    return redis.Redis(connection_pool=pool)


def commands_total(clients: Iterable[redis.Redis]) -> int:
    """Commands the servers have run so far (``INFO commandstats``), minus INFO itself."""
    total = 0
    for client in clients:
        for name, stats in client.info("commandstats").items():
            if name != "cmdstat_info":
                total += int(stats["calls"])
    return total


def server_cpu(clients: Iterable[redis.Redis]) -> float:
    """Seconds of CPU the servers have used so far (user + system, main thread)."""
    total = 0.0
    for client in clients:
        info = client.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def process_cpu(pid: int | None) -> float:
    """Seconds of CPU a local process (our ZooKeeper's JVM) has used; 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # after the command name: state is field 3, utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
