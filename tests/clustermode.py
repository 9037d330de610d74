"""Redis in cluster mode for tests: what a single Redis accepts, minus cross-slot calls.

A one-node Redis Cluster that owns all 16384 slots never redirects (no MOVED), so a
plain redis-py client works against it, yet it refuses with ``CROSSSLOT`` any script,
MULTI/EXEC or multi-key command whose keys hash to different slots: exactly the calls
that would break the day the deployment moves to a real cluster.
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import redis
from redis.crc import key_slot

from lockcore.embedded import RedisServer


def free_cluster_port() -> int:
    """A port whose cluster-bus twin (port + 10000) is free too; both must be < 65536."""
    for _ in range(200):
        port = random.randint(20_000, 55_000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster-mode redis-server")


def start_cluster_nodes(count: int) -> list[RedisServer]:
    """One-node Redis Clusters owning every slot: only cross-slot calls fail on them.

    A node reports ``cluster_state:ok`` about two seconds after it gets its slots, so
    all of them are started first and then awaited together.
    """
    return _cluster_nodes(count, [(0, 16384)] * count, meet=False)


def start_cluster(count: int) -> list[RedisServer]:
    """A real Redis Cluster of ``count`` primaries, the 16384 slots split between them
    (joined with CLUSTER MEET), for a ``redis.cluster.RedisCluster`` client: it
    redirects, and each node serves only its own slots. Stopped by pid on failure; the
    caller cleans the nodes up."""
    bounds = [16384 * i // count for i in range(count + 1)]
    return _cluster_nodes(count, list(zip(bounds, bounds[1:], strict=False)), meet=True)


def _cluster_nodes(count: int, slots: list[tuple[int, int]], *, meet: bool
                   ) -> list[RedisServer]:
    """``count`` cluster-mode nodes, node i owning ``slots[i]`` (low, high), met into one
    cluster if ``meet``; returned once every node says ``cluster_state:ok`` and knows
    the others. Stopped by pid on failure."""
    nodes: list[RedisServer] = []
    try:
        for _ in range(count):
            nodes.append(RedisServer(port=free_cluster_port(), args=[
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]).start())
        clients = [redis.Redis.from_url(node.url, decode_responses=True) for node in nodes]
        for client, (low, high) in zip(clients, slots, strict=True):
            client.execute_command("CLUSTER ADDSLOTS", *range(low, high))
        if meet:
            for node in nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        known = count if meet else 1
        deadline = time.monotonic() + 20
        for client in clients:
            while (info := client.execute_command("CLUSTER INFO")).get("cluster_state") != "ok" \
                    or int(info.get("cluster_known_nodes", 0)) != known:
                assert time.monotonic() < deadline, "a cluster never reached state ok"
                time.sleep(0.05)
            client.close()
    except BaseException:
        for node in nodes:
            node.cleanup()
        raise
    return nodes


@contextlib.contextmanager
def stopped_after(nodes: list[RedisServer]) -> Iterator[list[RedisServer]]:
    """``nodes``, each stopped by pid on leaving (a module's fixture)."""
    try:
        yield nodes
    finally:
        for node in nodes:
            node.cleanup()


class RecordingRedis(redis.Redis):
    """A redis-py client that remembers the keys of every script call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.script_keys: list[tuple[str, ...]] = []

    def _record(self, numkeys: int, keys_and_args: tuple[Any, ...]) -> None:
        self.script_keys.append(tuple(
            k.decode() if isinstance(k, bytes) else str(k) for k in keys_and_args[:numkeys]))

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:  # type: ignore[override]
        self._record(numkeys, keys_and_args)
        return super().evalsha(sha, numkeys, *keys_and_args)

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:  # type: ignore[override]
        self._record(numkeys, keys_and_args)
        return super().eval(script, numkeys, *keys_and_args)

    def cross_slot_calls(self) -> list[tuple[str, ...]]:
        return [keys for keys in self.script_keys if len({key_slot(k.encode()) for k in keys}) > 1]
