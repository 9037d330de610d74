"""Seed 001's ZooKeeper lock recipe, as the seed first wrote it: deliberately unsafe.

This exists only for the ghost-node lab; production code uses kazoo's ``Lock`` recipe
(``lockcore.create("zookeeper", ...)``).

**How it works.** Every contender creates an ephemeral sequential node
``<path>/_000000000N``; the one with the smallest sequence number holds the lock; each
other contender watches the node just before its own and looks again when that node
is deleted. Release deletes your node; a crashed holder's session expires and
ZooKeeper deletes its ephemeral node. FIFO, no polling, no TTL to guess.

**The flaw (幽灵节点, the ghost node).** ``create`` is not idempotent. If the server
creates the node but the reply is lost (connection loss), the client retries and
creates a *second* node. Nothing in the first node's name says whose it is, so the
client never finds it again: it waits behind its own ghost, which is the smallest node,
and which lives as long as the client's session does. Everyone else waits behind the
client. Nobody ever acquires.

**The fix** (seed 001, and kazoo's recipe): put a client UUID in the node name, look
for a node with that prefix before re-creating, and sort by sequence number only.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

NODE_PREFIX = "_"


class NaiveZkLock:
    """Seed 001's recipe with kazoo primitives only: create, get_children, exists+watch."""

    def __init__(self, client: Any, path: str) -> None:
        self.client = client
        self.path = path
        self.node: str | None = None

    def create_node(self) -> str:
        """One ephemeral sequential node; returns its name (``_0000000003``)."""
        self.client.ensure_path(self.path)
        full: str = self.client.create(f"{self.path}/{NODE_PREFIX}", ephemeral=True,
                                       sequence=True)
        return full.rsplit("/", 1)[1]

    def acquire(self, timeout: float, *, lose_first_reply: bool = False) -> bool:
        """Wait up to ``timeout`` seconds to hold the lock.

        :param lose_first_reply: inject seed 001's fault: the first create succeeds on
            the server, its reply is dropped, and the client "retries" the create.
        """
        if lose_first_reply:
            ghost = self.create_node()
            logger.info("created %s but the reply is lost; retrying the create", ghost)
        self.node = self.create_node()
        deadline = time.monotonic() + timeout
        while True:
            children = sorted(self.client.get_children(self.path))
            if children[0] == self.node:
                return True
            # watch only the predecessor: a release wakes one waiter, not the herd
            predecessor = children[children.index(self.node) - 1]
            gone = threading.Event()
            watch = lambda _event, done=gone: done.set()  # noqa: E731
            if self.client.exists(f"{self.path}/{predecessor}", watch=watch):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not gone.wait(remaining):
                    return False

    def release(self) -> None:
        if self.node is not None:
            self.client.delete(f"{self.path}/{self.node}")
            self.node = None
