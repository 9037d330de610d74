"""ghost-node: a lost create reply deadlocks the naive ZooKeeper lock; kazoo's UUID guard does not.

Seed 001 (幽灵节点). We start our own ZooKeeper and three clients, each with its own
session. Client A's first ``create`` succeeds on the server but A never sees the reply:
the lab injects that fault deterministically instead of waiting for a real network
hiccup.

* Naive recipe (``naive_zk.py``): A "retries" and creates a second node. Its first
  node, the ghost, is the smallest; A waits behind it, B and C wait behind A. Nobody
  acquires in ``DEADLOCK_WAIT_S`` seconds, and nobody ever would while A's session is
  alive. Closing A's session (what an operator ends up doing) deletes the ghost.
* kazoo's ``Lock`` recipe: the fault is injected into its real retry path (the create
  raises ``ConnectionLoss`` after the server made the node; ``LostReply`` records the
  node, and the verdict needs it). kazoo retries, finds its own node by the UUID prefix
  in its name, and does not create a second one: A acquires on the node whose reply was
  lost, the only child, releases, and B gets the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.recipe.lock import Lock

from lockcore.zkserver import ZooKeeperServer

from .naive_zk import NaiveZkLock
from .narration import Narrator, Verdict

TITLE = "a lost create reply leaves a ghost node that deadlocks the naive ZooKeeper lock"
SEED = "001"
DEADLOCK_WAIT_S = 2.0
#: how long B and C wait on after A gave up: A's session closes in that time
AFTER_S = 10.0
#: how long the lab waits for a client's node to appear in the queue (a round trip)
QUEUE_WAIT_S = 10.0


@contextmanager
def zookeeper_sessions(narrator: Narrator, count: int) -> Iterator[list[KazooClient]]:
    """Our own ZooKeeper and ``count`` clients, each with its own session."""
    with ExitStack() as stack:
        server = stack.enter_context(ZooKeeperServer())
        narrator("ZooKeeper pid %s on %s", server.pid, server.hosts)
        clients = []
        for _ in range(count):
            client = KazooClient(hosts=server.hosts, timeout=10)
            client.start(timeout=30)
            stack.callback(stop_and_close, client)
            clients.append(client)
        yield clients
    narrator("ZooKeeper stopped")


def stop_and_close(client: KazooClient) -> None:
    """Stop ``client``'s session, then free its socket: close only once stop returned.

    Two callbacks (close, then stop, on the stack) failed a Ctrl-C that came during
    stop: close raised "Cannot close connection until it is stopped", and ExitStack
    left the KeyboardInterrupt out of that error's chain, so the run said "VERDICT: lab
    error" with exit 1, not 130 (a labs audit). An interrupted stop now propagates as
    it is; the process is on its way out, and its socket with it."""
    client.stop()
    client.close()


class LostReply:
    """``client.create`` patched to succeed on the server once, then raise ConnectionLoss.

    ``path`` is the node that create made, once the fault has fired (None until then):
    a lab that claims kazoo survived a lost reply must first show that one was lost.
    The narration comes from here, when it happens, not from the lab's hopes.
    """

    def __init__(self, client: KazooClient, narrator: Narrator) -> None:
        self.client, self.narrator = client, narrator
        self.path: str | None = None
        self._real_create = client.create
        client.create = self._create_and_lose_reply

    def _create_and_lose_reply(self, *args: Any, **kwargs: Any) -> str:
        self.undo()  # only the first reply is lost
        created: str = self._real_create(*args, **kwargs)
        self.path = created
        self.narrator("A: create -> %s on the server, reply LOST (ConnectionLoss)",
                      created.rsplit("/", 1)[1])
        raise ConnectionLoss(f"reply to create of {created} lost")

    def undo(self) -> None:
        self.client.create = self._real_create


def wait_queued(lock: NaiveZkLock, who: str, worker: threading.Thread) -> None:
    """Wait until ``lock`` has its node in the queue; bounded: an acquire that ended or
    hung without one is a broken lab, not a reason to spin forever."""
    deadline = time.monotonic() + QUEUE_WAIT_S
    while lock.node is None:
        if not worker.is_alive():
            raise RuntimeError(f"{who}'s acquire ended without queueing a node")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{who} queued no node in {QUEUE_WAIT_S:g} s")
        threading.Event().wait(0.01)


def naive_act(narrator: Narrator, a: KazooClient, b: KazooClient,
              c: KazooClient) -> dict[str, bool]:
    """The ghost deadlocks every client until A's session closes; then B and C get it.

    A gives up after ``DEADLOCK_WAIT_S``; B and C keep waiting (``AFTER_S`` more), so
    that when A's session closes they are still queued and the lock is seen to work
    again: B first, C after B releases. (The naive recipe leaves a node queued when its
    acquire gives up: a waiter that left would be a second ghost.)
    """
    path = "/seckill/naive/sku-1"
    locks = {"A": NaiveZkLock(a, path), "B": NaiveZkLock(b, path), "C": NaiveZkLock(c, path)}
    got: dict[str, bool] = {}
    lock_a = locks["A"]
    # daemons: a Ctrl-C leaves the lab at once, not once B and C give up (12 s later)
    workers = {"A": threading.Thread(target=lambda: got.__setitem__(
        "A", lock_a.acquire(DEADLOCK_WAIT_S, lose_first_reply=True)), daemon=True)}
    workers["A"].start()
    wait_queued(lock_a, "A", workers["A"])  # A's nodes first, so the ghost is the smallest
    for name in ("B", "C"):
        lock = locks[name]
        workers[name] = threading.Thread(target=lambda n=name, lk=lock: got.__setitem__(
            n, lk.acquire(DEADLOCK_WAIT_S + AFTER_S)), daemon=True)
        workers[name].start()
        wait_queued(lock, name, workers[name])  # B queues before C
    children = sorted(a.get_children(path))
    ghost = children[0]
    owner = a.exists(f"{path}/{ghost}").ephemeralOwner
    narrator("A: create -> %s on the server, reply LOST; A retries -> %s", ghost, lock_a.node)
    narrator("B, C create theirs; children now %s", children)
    narrator("%s is the smallest; its owner session 0x%x is A's (0x%x), but A does not know",
             ghost, owner, a.client_id[0])
    workers["A"].join(DEADLOCK_WAIT_S + 5)
    waiting = [name for name in ("B", "C") if name not in got]
    narrator("after %.0f s: A acquired=%s and gave up; nobody holds the lock; still waiting: %s",
             DEADLOCK_WAIT_S, got.get("A"), ", ".join(waiting) or "nobody")
    deadlocked = (got.get("A") is False and waiting == ["B", "C"]
                  and owner == a.client_id[0])
    a.stop()
    narrator("A's session closes: its ephemeral nodes (ghost included) vanish; children %s",
             sorted(b.get_children(path)))
    workers["B"].join(AFTER_S + 5)
    b_got = got.get("B") is True and "C" not in got
    narrator("B acquired=%s (the deadlock went with the ghost); C still waiting: %s",
             got.get("B"), "C" not in got)
    if got.get("B"):
        locks["B"].release()
    workers["C"].join(AFTER_S + 5)
    narrator("B releases; C acquired=%s", got.get("C"))
    if got.get("C"):
        locks["C"].release()
    return {"naive_deadlocked": deadlocked, "naive_b_after": b_got,
            "naive_c_after": got.get("C") is True}


def kazoo_act(narrator: Narrator, a: KazooClient, b: KazooClient) -> dict[str, bool]:
    """kazoo's UUID-guarded retry after a lost create reply: the facts.

    ``kazoo_fault_injected``: A's create really lost its reply; ``kazoo_recovered``: A
    acquired on the very node whose reply was lost, the only child, B was refused while
    A held it and got it after."""
    path = "/seckill/kazoo/sku-1"
    lock_a, lock_b = Lock(a, path, "A"), Lock(b, path, "B")
    lost = LostReply(a, narrator)
    try:
        a_got = lock_a.acquire(timeout=10)
    finally:
        lost.undo()
    children, a_node = sorted(a.get_children(path)), lock_a.node
    lost_node = lost.path.rsplit("/", 1)[1] if lost.path else None
    if lost_node is not None:
        narrator("kazoo retried and looked for its prefix %s... first", lock_a.prefix[:12])
    narrator("A acquired=%s using its first node %s; children %s (%s)", a_got, a_node,
             children, "no ghost" if children == [lost_node] else
             "no reply was lost" if lost_node is None else "NOT the lost node alone")
    b_blocked = not lock_b.acquire(blocking=False)
    narrator("B while A holds: acquired=%s", not b_blocked)
    lock_a.release()
    b_got = lock_b.acquire(timeout=10)
    narrator("A releases; B acquired=%s", b_got)
    lock_b.release()
    return {"kazoo_fault_injected": lost_node is not None,
            "kazoo_recovered": (a_got and children == [lost_node]
                                and a_node == lost_node and b_blocked and b_got)}


def run(narrator: Narrator) -> Verdict:
    with zookeeper_sessions(narrator, 3) as (a, b, c):
        narrator.section("seed 001's naive recipe: _000000000N nodes, no client id")
        naive = naive_act(narrator, a, b, c)
    with zookeeper_sessions(narrator, 2) as (a, b):
        narrator.section("kazoo's Lock recipe: <uuid>__lock__000000000N nodes")
        guarded = kazoo_act(narrator, a, b)
    facts = {**naive, **guarded}
    if all(facts.values()):
        return Verdict(True, f"the ghost node deadlocked every naive client for "
                       f"{DEADLOCK_WAIT_S:.0f}s, until A's session closed; kazoo's UUID prefix "
                       f"found its own node and the lock kept working", facts)
    return Verdict(False, f"expected a naive deadlock and a kazoo recovery; saw {facts}", facts)
