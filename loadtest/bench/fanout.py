"""How to send one command to five Redis nodes: what each way costs the client.

    python -m loadtest.bench.fanout [calls]

RedLock talks to every node at each step. A thread pool overlaps the waits but pays
for a hand-off per node; a plain loop pays one full round trip per node; writing the
command to all five sockets and only then reading the five replies overlaps the waits
with no threads at all. This prints wall time and client CPU per five-node call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import redis

from lockcore.embedded import EmbeddedRedis


def ways(clients: list[redis.Redis], pool: ThreadPoolExecutor) -> dict[str, Callable[[], Any]]:
    conns = [c.connection_pool.get_connection() for c in clients]

    def thread_pool() -> Any:
        futures = [pool.submit(c.set, "k", "v", px=10_000) for c in clients]
        wait(futures, timeout=0.2)
        return [f.result() for f in futures]

    def one_after_another() -> Any:
        return [c.set("k", "v", px=10_000) for c in clients]

    def send_all_then_read_all() -> Any:
        for conn in conns:
            conn.send_command("SET", "k", "v", "PX", 10_000)  # type: ignore[no-untyped-call]
        return [conn.read_response() for conn in conns]

    return {"thread pool": thread_pool, "one after another": one_after_another,
            "send all, then read all": send_all_then_read_all}


def main(calls: int = 3000) -> None:
    with EmbeddedRedis(5) as five, ThreadPoolExecutor(64) as pool:
        clients = [redis.Redis.from_url(url) for url in five.urls]
        for _ in range(2):  # the second pass is the one to read: warm caches, threads
            for name, call in ways(clients, pool).items():
                call()
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    call()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                print(f"{name:24} {wall / calls * 1e6:6.0f} us wall "
                      f"{cpu / calls * 1e6:6.0f} us client CPU per 5-node call")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
