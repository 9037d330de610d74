"""One started ``KazooClient`` per hosts string, shared by this process's locks.

A ZooKeeper session costs a TCP connection, a server-side session and a heartbeat
thread; opening one per lock handle (the web app builds a handle per request) would
swamp the server. The clients are stopped at exit, or by ``close_shared_clients()``.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

ZK_TIMEOUT_S = 10.0

_shared: dict[str, Any] = {}
_shared_guard = threading.Lock()


def shared_client(hosts: str) -> Any:
    """One started client per hosts string: a ZooKeeper session is too dear per lock."""
    with _shared_guard:
        client = _shared.get(hosts)
        if client is None:
            from kazoo.client import KazooClient

            client = KazooClient(hosts=hosts, timeout=ZK_TIMEOUT_S)
            client.start(timeout=15)  # raises on failure: nothing half-started is kept
            _shared[hosts] = client
        return client


@atexit.register
def close_shared_clients() -> None:
    """Stop the clients ``shared_client`` started (at exit, or when their server goes)."""
    with _shared_guard:
        clients = list(_shared.values())
        _shared.clear()
    for client in clients:
        client.stop()
        client.close()
