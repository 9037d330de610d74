"""Real servers for a lab: started on free loopback ports, stopped by pid, always.

Labs never use a Redis they did not start (least of all one on 6379): a lab kills,
pauses and flushes its servers on purpose. These helpers wrap
``lockcore.embedded`` so every lab starts and narrates its servers the same way, and
so a lab that fails half-way still stops what it started (``with`` blocks, plus
``lockcore.embedded``'s own atexit hook).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from lockcore.embedded import EmbeddedRedis, RedisServer

from .narration import Narrator

#: labs talk to servers they pause and kill: never wait long for an answer
SOCKET_TIMEOUT_S = 1.0


def client_for(server: RedisServer, *, timeout: float = SOCKET_TIMEOUT_S) -> redis.Redis:
    """A redis-py client of ``server`` whose calls fail fast when it is paused or dead."""
    return redis.Redis.from_url(server.url, socket_timeout=timeout,
                                socket_connect_timeout=timeout)


@contextmanager
def lab_redis(narrator: Narrator, nodes: int = 1) -> Iterator[list[RedisServer]]:
    """Start ``nodes`` independent redis-server processes for one lab, narrated."""
    with EmbeddedRedis(nodes) as cluster:
        for server in cluster.servers:
            narrator("redis-server pid %s listening on %s", server.pid, server.url)
        yield cluster.servers
    narrator("redis-server%s stopped", "s" if nodes > 1 else "")


@contextmanager
def lab_client(narrator: Narrator) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """One server and a client of it: what most single-Redis labs need."""
    with lab_redis(narrator) as servers:
        client = client_for(servers[0])
        try:
            yield servers[0], client
        finally:
            client.close()
