"""zookeeper: kazoo's ``Lock`` recipe on real ZooKeeper. Safe, FIFO, no TTL to tune.

**Guarantee.** At most one live session holds the lock; waiters are served in arrival
order; a crashed holder loses the lock when its session expires (no TTL to guess); the
fencing token (the znode's sequence number) grows with every acquisition.

**Algorithm** (seed 001, the production recipe; we wrap kazoo, we do not rewrite it).

1. Create an ephemeral *sequential* znode ``/seckill/locks/<name>/<uuid>__lock__000000000N``.
2. The smallest sequence number holds the lock. Every other contender watches only its
   *predecessor* (no thundering herd: one delete wakes one waiter).
3. Release deletes our node; so does the server when our session expires.

The ``<uuid>`` prefix is kazoo's answer to seed 001's *ghost node*: if ``create``
succeeds but the reply is lost, the retry finds our node by prefix instead of creating
a second one nobody would delete (the ghost-node lab shows the deadlock without it).

**Failure timeline** (kazoo's caveat, which applies to every ZooKeeper lock)::

    A: holds node ..0001;  A's network drops -> kazoo state SUSPENDED
       A cannot know whether the session is still alive: it must stop writing now
    -- session timeout passes on the server -> node ..0001 deleted, state LOST --
    B: node ..0002 is now smallest -> B holds the lock
    A: reconnects with a new session; it lost the lock long ago

So we report both SUSPENDED and LOST to the holder as a lost lock (``lock.lost``,
``on_lost``, ``LockLost`` on leaving ``with``). A paused holder (GC) sees neither in
time: its writes still need ``fencing_token`` checked by the store.

**Unreachable ZooKeeper.** kazoo queues its calls until the connection is back and
waits for them without a limit, whatever ``acquire``'s timeout. So ``acquire`` on a
client that is not connected raises kazoo's ``ConnectionLoss`` at once (the shop answers
503), and a waiter already queued when the connection drops leaves at its timeout
(plus ``LEAVE_GRACE_S``) with ``ConnectionLoss``: kazoo's acquire runs on a thread the
caller can abandon (``zookeeper_attempt.py``). Only ``timeout=None`` waits out an outage.
A release waits at most ``RELEASE_WAIT_S`` for the delete's reply, then raises
``LockNotOwned`` (the lock was reported lost at SUSPENDED anyway); a delete that failed
or went unconfirmed is sent again once the session is back (``zookeeper_release.py``:
kazoo does not, and a surviving session kept the node, and the lock, for good). ``locked()`` raises
``ConnectionLoss`` at once when disconnected, or after ``QUERY_WAIT_S`` without an
answer; so does ``held()`` while the lock is not yet reported lost, and once it is (at
SUSPENDED) ``held()`` answers False without asking. A hosts string that no server
answers raises ``ConnectionLoss`` from ``create`` after
``zookeeper_clients.START_TIMEOUT_S``, holding up no other hosts.

**Options.** ``ttl_ms``, ``wait``, ``poll_ms`` do not apply (the session is the lease,
watches are the wake-up). ``backend``: a started ``KazooClient`` or a hosts string.

**When to use it.** When ZooKeeper is already there, waits may be long, and fairness
and crash detection without TTL guessing matter more than latency.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

try:  # the "zookeeper" extra; without it lockcore.strategies() still lists this class
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError
    from kazoo.exceptions import LockTimeout as KazooLockTimeout
    from kazoo.protocol.states import KazooState
    from kazoo.recipe.lock import Lock as KazooLock
except ImportError:  # pragma: no cover
    KazooClient = None

from ..base import DistributedLock, new_token
from ..errors import LockNotOwned
from .zookeeper_attempt import LEAVE_GRACE_S, Attempt
from .zookeeper_clients import hosts_problem, shared_client
from .zookeeper_release import delete_later

logger = logging.getLogger(__name__)

if KazooClient is not None:
    class CleaningLock(KazooLock):  # type: ignore[misc]  # (kazoo has no types)
        """kazoo's ``Lock``, whose give-up cleanup (a waiter's timeout, ``cancel``) sends
        a delete the connection's loss failed again once the session is back
        (``zookeeper_release.py``): kazoo's swallowed it, and a session that survived
        kept the waiter's node at the head of the queue for good."""

        def _best_effort_cleanup(self) -> None:
            try:
                node = self.node or self._find_node()
                if node:
                    self._delete_node(node)
            except NoNodeError:
                pass
            except KazooException:  # the node's name if known, else its attempt's prefix
                delete_later(self.client, self.path, self.node or self.prefix)

ROOT = "/seckill/locks"
#: how long a release waits for ZooKeeper to confirm the delete (a round trip when up)
RELEASE_WAIT_S = 2.0
#: how long ``locked()`` and ``held()`` wait for ZooKeeper's answer (a round trip when up)
QUERY_WAIT_S = 2.0


def _reply_within(pending: Any, seconds: float, silence: Callable[[], Exception]) -> Any:
    """The reply to kazoo's async call ``pending``, or ``silence()`` raised after ``seconds``.

    wait() + ready(), not get(timeout): under kazoo's gevent handler that timeout is a
    BaseException, which a gevent worker would answer with a 500."""
    pending.wait(seconds)
    if not pending.ready():
        raise silence()
    return pending.get()


def _znode_unsafe(ch: str) -> bool:
    """A character ZooKeeper refuses in a node name (its PathUtils: controls, the
    surrogates and private use, U+FFF0 on; Java's strings cannot hold one past U+FFFF
    without surrogates), or one the name's escaping itself needs (``%``, ``/``)."""
    code = ord(ch)
    return (ch in "%/" or code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF
            or code >= 0xFFF0)


def znode_name(name: str) -> str:
    """``name`` as one znode, one to one: the characters ZooKeeper refuses, ``/`` and ``%``
    itself percent-encoded (UTF-8); ``.`` and ``..`` too, which are not node names. So
    ``a/b`` is ``a%2Fb`` and ``a%2Fb`` is ``a%252Fb``: two names never share a lock."""
    if name in (".", ".."):
        return name.replace(".", "%2E")
    if not any(map(_znode_unsafe, name)):
        return name
    return "".join("".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
                   if _znode_unsafe(ch) else ch for ch in name)


#: the longest lock path we send. ZooKeeper takes a packet of up to ``jute.maxbuffer``
#: (about 1 MB); a name near that made every create fail and the shared session drop
#: again and again, so acquire said "held" and other locks on that session were lost
#: (a lockcore audit). Far above any real name.
MAX_PATH_BYTES = 16_384


class ZooKeeperLock(DistributedLock):
    needs_redis = False
    name_is_hash_tag = False  # a znode path, no Redis key
    strategy = "zookeeper"
    safe = True
    origin = "seed 001"
    summary = "kazoo's ephemeral sequential znodes: FIFO, session is the lease, fencing by seq"
    expires = False
    signals_on_release = True  # the deleted znode is the wake-up (a watch), not a list

    def __init__(self, backend: Any, name: str, **options: Any) -> None:
        if KazooClient is None:
            raise ImportError("the zookeeper strategy needs kazoo: pip install seckill[zookeeper]")
        #: the hosts string the handle was made with: a forked child takes its own
        #: process's shared client for it (``_own_client``)
        self._hosts = backend if isinstance(backend, str) else None
        self._pid = os.getpid()
        if self._hosts is None and not isinstance(backend, KazooClient):
            raise TypeError("zookeeper needs a KazooClient or a hosts string")
        # The name and options first: dialling a hosts string takes up to 15 s, and a
        # bad name or option came out of it as ConnectionLoss (a lockcore audit).
        super().__init__(backend, name, **options)
        self.ttl_ms = None  # the ZooKeeper session is the lease
        self.path = f"{ROOT}/{znode_name(name)}"
        size = len(self.path.encode("utf-8", "surrogatepass"))
        if size > MAX_PATH_BYTES:
            raise ValueError(f"a zookeeper lock name must make a path of at most "
                             f"{MAX_PATH_BYTES} bytes; this one makes {size}")
        if self._hosts is not None:  # one shared client per hosts string in this process
            if (problem := hosts_problem(self._hosts)) is not None:
                raise ValueError(f"zookeeper hosts {self._hosts!r} is not a hosts string "
                                 f"like 127.0.0.1:2181,127.0.0.1:2182 ({problem})")
            self.client = shared_client(self._hosts)
        self._recipe: KazooLock | None = None
        #: while held: our session listener (holding us weakly)
        self._listener: Callable[[str], bool] | None = None

    def _acquire(self, blocking: bool, timeout: float | None) -> bool:
        """Queue in ZooKeeper and wait for our turn (kazoo does the waiting)."""
        self._check_acquire(blocking, timeout)
        self.fencing_token = None  # a failed acquire shows none, not the last hold's
        self._own_client()
        if not self.client.connected:
            # kazoo queues every call until the connection is back and waits for it with
            # no limit, whatever the timeout: a purchase would hang for the whole outage.
            raise ConnectionLoss(f"ZooKeeper is not connected ({self._state()}): "
                                 f"cannot acquire {self.name!r}")
        token = new_token()
        recipe = CleaningLock(self.client, self.path, identifier=token)
        attempt = Attempt(recipe, blocking, timeout)
        limit = None if blocking and timeout is None else (timeout or 0) + LEAVE_GRACE_S
        if not attempt.finished_within(limit):  # abandoned: it cleans up after itself
            if not self.client.connected:
                raise ConnectionLoss(f"ZooKeeper connection lost while waiting for "
                                     f"{self.name!r} (state {self.client.state})")
            return False
        if isinstance(attempt.error, KazooLockTimeout):  # kazoo has already deleted our node
            return False
        if attempt.error is not None:
            raise attempt.error
        if not attempt.gotten:
            return False
        self._recipe = recipe
        self.fencing_token = int(recipe.node[-10:])  # sequence numbers never repeat
        self._on_acquired(token)
        self._listener = _weak_listener(self)
        self.client.add_listener(self._listener)
        # A handle dropped while held: its znode lives as long as the session, which for
        # a hosts string is the process's. It held the lock for good: the listener above
        # kept the handle alive (a lockcore audit). Collected, it deletes its node, as a
        # Redis lock's TTL frees a dropped handle's key.
        self._let_go_if_collected(_drop_orphan, self.client, self._listener,
                                  f"{self.path}/{recipe.node}", self.name)
        return True

    def _try_acquire(self, token: str) -> bool:  # pragma: no cover - acquire() is kazoo's
        raise NotImplementedError("ZooKeeperLock.acquire delegates to kazoo")

    def _release(self, token: str) -> None:
        recipe, self._recipe = self._recipe, None
        if self._listener is not None:
            self.client.remove_listener(self._listener)
            self._listener = None
        if recipe is None or recipe.node is None:
            raise LockNotOwned("release of a lock this handle does not hold", self.name)
        node = f"{self.path}/{recipe.node}"
        try:
            # Bounded: kazoo would wait out an outage, holding up the holder's answer.
            _reply_within(self.client.delete_async(node), RELEASE_WAIT_S, lambda: LockNotOwned(
                f"ZooKeeper did not confirm the release within {RELEASE_WAIT_S}s (state "
                f"{self.client.state}); the node is deleted once the session is back, or "
                f"with the session's end", self.name))
        except NoNodeError:
            raise LockNotOwned("our znode is gone: the session expired, or someone deleted it",
                               self.name) from None
        except LockNotOwned:
            delete_later(self.client, self.path, recipe.node)  # it may never have gone out
            raise
        except KazooException as exc:
            # kazoo does not send a delete the connection's loss failed: a session that
            # survives keeps our node, the smallest, and the lock for good
            # (``zookeeper_release.py``)
            delete_later(self.client, self.path, recipe.node)
            raise LockNotOwned(f"cannot reach ZooKeeper to release: {exc!r}; the node is "
                               "deleted once the session is back, or with the session's "
                               "end", self.name) from exc
        finally:
            recipe.is_acquired, recipe.node = False, None

    def _is_held(self, token: str) -> bool:
        recipe = self._recipe
        if recipe is None or recipe.node is None:
            return False
        node = self._answer(lambda: self.client.exists_async(f"{self.path}/{recipe.node}"),
                            "our znode is still there")
        return node is not None

    def locked(self) -> bool:
        """Whether anyone holds or waits for the lock: any znode in its queue."""
        try:
            return bool(self._answer(lambda: self.client.get_children_async(self.path),
                                     "anyone holds the lock"))
        except NoNodeError:  # nobody ever queued here
            return False

    def _own_client(self) -> None:
        """After a fork, a handle made with a hosts string takes this process's shared
        client (``zookeeper_clients``); a KazooClient started before the fork is refused
        by name. Its connection thread did not come along: it still said ``connected``,
        and ``acquire(timeout=2)`` on a free lock returned False after 2.5 s, as if the
        lock were held (a lockcore audit)."""
        if self._hosts is not None:
            if self._pid != os.getpid():
                self.client, self._pid = shared_client(self._hosts), os.getpid()
            return
        connection = getattr(self.client, "_connection", None)
        routine = getattr(connection, "_connection_routine", None)
        if isinstance(routine, threading.Thread) and not routine.is_alive() \
                and self.client.connected:
            raise ConnectionLoss(
                f"this KazooClient's connection thread is not running in process "
                f"{os.getpid()}: it was started before a fork and belongs to the parent; "
                "start a KazooClient in this process, or pass a hosts string")

    def _state(self) -> str:
        """The client's state, and for one that was never started (or was stopped) what
        to do about it: the message said only 'state LOST'."""
        state = f"state {self.client.state}"
        if getattr(self.client, "_stopped", None) is not None and self.client._stopped.is_set():
            state += "; this KazooClient is not started: call its start(), or pass a hosts string"
        return state

    def _answer(self, ask: Callable[[], Any], question: str) -> Any:
        """The reply to the query ``ask`` sends, or ``ConnectionLoss`` within ``QUERY_WAIT_S``.

        kazoo holds a call made while disconnected until the connection is back and
        waits for it with no limit: ``locked()`` would hang for the whole outage."""
        self._own_client()
        if not self.client.connected:
            raise ConnectionLoss(f"ZooKeeper is not connected ({self._state()}): "
                                 f"cannot ask whether {question} ({self.name!r})")
        return _reply_within(ask(), QUERY_WAIT_S, lambda: ConnectionLoss(
            f"ZooKeeper did not answer within {QUERY_WAIT_S}s whether {question} "
            f"({self.name!r}, state {self.client.state})"))

    def _on_session_change(self, state: str) -> bool:
        """kazoo connection listener; returning True unregisters it."""
        if self._token is None:
            return True
        if state == KazooState.SUSPENDED:
            self._mark_lost("ZooKeeper connection suspended: the session may expire")
        elif state == KazooState.LOST:
            reason = "ZooKeeper session lost: the server deleted our znode"
            if self._lost_reason is not None:  # "may expire" at SUSPENDED: now it did
                self._lost_reason = reason  # (LockLost said "may" after it had: an audit)
            else:
                self._mark_lost(reason)
            return True
        return False


def _weak_listener(lock: ZooKeeperLock) -> Callable[[str], bool]:
    """``lock._on_session_change`` as a kazoo listener that does not keep ``lock`` alive
    (kazoo keeps its listeners for the client's life); it unregisters itself once the
    lock is gone."""
    ref = weakref.ref(lock)

    def listener(state: str) -> bool:
        alive = ref()
        return True if alive is None else alive._on_session_change(state)

    return listener


def _drop_orphan(client: Any, listener: Callable[[str], bool], node: str, name: str) -> None:
    """A held handle was garbage-collected: drop its listener and delete its znode
    (without waiting: a finalizer may run on any thread, kazoo's own included)."""
    logger.warning("zookeeper lock %r: its handle was collected while it held the lock; "
                   "deleting its znode %s", name, node)
    client.remove_listener(listener)  # else it lingered until the next state change
    try:
        client.delete_async(node)
    except Exception as exc:  # noqa: BLE001 - a closed client: its session's end deletes it
        logger.warning("zookeeper lock %r: could not delete %s: %s", name, node, exc)
