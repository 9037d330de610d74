"""A zookeeper release that ZooKeeper did not confirm: its delete, sent again.

A release is one ``delete`` of the holder's znode. kazoo sends it once: if the
connection drops while it is in flight, kazoo fails it with ``ConnectionLoss`` and never
sends it again. When the *session* survives the drop (ZooKeeper restarted with its
data, or the client reconnected within the session timeout), nothing else deletes the
node: it is the smallest in the queue, its owner's session is alive, and every later
contender waits for it for good.

**Failure timeline** (a ZooKeeper audit: 5 of 7 runs of 20 threads, ZooKeeper killed
for 4 s; the shop's sale refused every purchase and every reset until it restarted)::

    A: holds ..0265; sends delete ..0265
    -- ZooKeeper is killed before it answers: kazoo fails the delete (ConnectionLoss) --
    A: release raises LockNotOwned; A's session is alive, its node too
    -- ZooKeeper is back with its data; A's client reconnects in the same session --
    B: waits for ..0265, which nobody will ever delete

A waiter that gives up (its timeout, or an abandoned attempt) deletes its own node the
same way, once (kazoo's ``_best_effort_cleanup``, which swallows the failure): a waiter
timed out while ZooKeeper was frozen, then killed, left its node at the head of the
queue for good (a second ZooKeeper audit: 3 of 8 runs). ``CleaningLock`` sends that
delete here too.

So a release that failed or went unconfirmed leaves its node here (``delete_later``),
and each time the client is CONNECTED again the node is deleted if it is still ours:
it exists and its ephemeral owner is this client's session. A session that ended (LOST)
took its nodes with it: nothing is left to do. A ZooKeeper that came back *empty*
restarts its sequence numbers, and the owner check keeps the retry from deleting a
node that is not ours (each acquisition's node also carries its own uuid prefix).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: the attribute of a kazoo client that holds its ``_Unreleased`` (one per client)
_ATTRIBUTE = "_lockcore_unreleased"
_made = threading.Lock()


class _Unreleased:
    """One client's znodes whose release ZooKeeper did not confirm, each as its parent
    and its name (or, for a waiter that never learnt its node's name, the prefix
    every node of its attempt carries: kazoo's ``<uuid>__lock__``)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.paths: set[tuple[str, str]] = set()
        self.lock = threading.Lock()
        client.add_listener(self._state_changed)

    def _state_changed(self, state: str) -> bool:
        """kazoo's listener: runs on its connection thread, so it must not block."""
        if state == "CONNECTED":
            self.client.handler.spawn(self.retry)
        elif state == "LOST":  # the session ended: ZooKeeper deleted its nodes
            with self.lock:
                self.paths.clear()
        return False  # stay registered

    def retry(self) -> None:
        """Delete each node still ours; keep those ZooKeeper could not be asked about."""
        with self.lock:
            entries = sorted(self.paths)
        for parent, name in entries:
            try:
                done = self._delete_if_ours(parent, name)
            except Exception as exc:  # noqa: BLE001 - not connected after all: next time
                logger.info("zookeeper: the release of %s/%s is still unconfirmed: %r",
                            parent, name, exc)
                continue
            if done:
                with self.lock:
                    self.paths.discard((parent, name))

    def _delete_if_ours(self, parent: str, name: str) -> bool:
        from kazoo.exceptions import BadVersionError, NoNodeError

        session = (self.client.client_id or (None,))[0]
        if session is None:  # between sessions: the next CONNECTED tries again
            return False
        try:
            children = self.client.get_children(parent)
        except NoNodeError:
            return True
        for child in children:
            if not child.startswith(name):  # a name is its own prefix
                continue
            path = f"{parent}/{child}"
            stat = self.client.exists(path)
            if stat is None or stat.ephemeralOwner != session:
                continue  # deleted after all, or not ours any more
            try:
                self.client.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                continue
            logger.warning("zookeeper: deleted %s, whose delete the connection's loss had "
                           "left unconfirmed", path)
        return True


def delete_later(client: Any, parent: str, name: str) -> None:
    """Delete our znode ``parent``/``name`` (its delete unconfirmed; ``name`` may be the
    prefix of an attempt's node whose name was never learnt) once the client is
    connected again in the same session; now, if it already is."""
    with _made:
        unreleased = getattr(client, _ATTRIBUTE, None)
        if unreleased is None:
            unreleased = _Unreleased(client)
            setattr(client, _ATTRIBUTE, unreleased)
    with unreleased.lock:
        unreleased.paths.add((parent, name))
    if client.connected:  # back already: the CONNECTED that would retry it has passed
        client.handler.spawn(unreleased.retry)


def unreleased(client: Any) -> set[str]:
    """The znodes (or an attempt's prefix) of ``client`` whose delete is still to be
    confirmed (for tests)."""
    found = getattr(client, _ATTRIBUTE, None)
    if found is None:
        return set()
    with found.lock:
        return {f"{parent}/{name}" for parent, name in found.paths}
