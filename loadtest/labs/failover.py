"""failover: the primary dies before replicating the lock; the promoted replica grants it again.

Seed 004's first argument for RedLock. Redis replication is asynchronous: the primary
answers ``OK`` to ``SET lock NX PX`` and ships the write to its replica a moment later.
If the primary crashes inside that moment and the replica is promoted, the lock key
never existed as far as the new primary knows, so client B acquires the lock that
client A still holds. Even the fencing counter went back: B gets fencing token 1, the
same as A's, so a store checking fencing tokens cannot tell them apart.

The mitigation is ``WAIT numreplicas timeout`` right after acquiring: refuse the lock
unless a replica acknowledged it. That closes this timeline, but it is not consensus:

* WAIT reports that a replica *received* the write, not that it will be the one
  promoted (Sentinel prefers the most up-to-date replica, but a replica that restarts
  without persistence, or a manual failover to a lagging replica, still loses it);
* a WAIT that times out does not undo the SET: the primary keeps the key;
* nothing stops a promoted replica from accepting writes from the minority side.

WAIT narrows the window; a majority (RedLock) or consensus (ZooKeeper) closes it. The
link is cut through ``relay.py`` so the lost write happens on every run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import redis

import lockcore
from lockcore.embedded import RedisServer

from .narration import Narrator, Verdict
from .relay import Relay
from .servers import client_for

TITLE = "the primary dies before replicating the lock; the promoted replica grants it again"
SEED = "004"
RESOURCE = "stock:sku-1"
TTL_MS = 30_000
#: how long WAIT may take; generous, so a busy machine does not read as a lost write
WAIT_MS = 1_000


@contextmanager
def primary_and_replica(narrator: Narrator) -> Iterator[tuple[RedisServer, RedisServer, Relay]]:
    """A primary, a relay in front of it, and a replica replicating through the relay."""
    with ExitStack() as stack:
        primary = RedisServer(args=["--repl-diskless-sync-delay", "0"]).start()
        stack.callback(primary.cleanup)
        relay = Relay(primary.port)
        stack.callback(relay.close)
        replica = RedisServer(args=["--replicaof", "127.0.0.1", str(relay.port)]).start()
        stack.callback(replica.cleanup)
        wait_for_link(replica, up=True)
        narrator("primary pid %s on :%s, replica pid %s on :%s replicating (link up)",
                 primary.pid, primary.port, replica.pid, replica.port)
        yield primary, replica, relay


def wait_for_link(replica: RedisServer, *, up: bool, timeout: float = 15.0) -> None:
    """Block until the replica reports its link to the primary up (or down)."""
    client = client_for(replica)
    want = "up" if up else "down"
    deadline = time.monotonic() + timeout
    try:
        while client.info("replication").get("master_link_status") != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica link did not go {want} within {timeout}s")
            time.sleep(0.05)
    finally:
        client.close()


def fail_over(narrator: Narrator, primary: RedisServer, replica: RedisServer) -> redis.Redis:
    """Kill the primary (SIGKILL: a crash) and promote the replica, as Sentinel would."""
    primary.kill()
    narrator("primary crashes (SIGKILL: its process is gone); the replica is promoted: "
             "REPLICAOF NO ONE")
    promoted = client_for(replica)
    promoted.replicaof("NO", "ONE")
    return promoted


def acquire_replicated(lock: lockcore.DistributedLock, client: Any, replicas: int = 1,
                       timeout_ms: int = WAIT_MS) -> tuple[bool, int]:
    """Acquire, then keep the lock only if ``replicas`` replicas acknowledged it (WAIT).

    :returns: (kept, how many replicas acknowledged)
    """
    if not lock.acquire(blocking=False):
        return False, 0
    acked = int(client.wait(replicas, timeout_ms))
    if acked < replicas:
        lock.release()  # an unreplicated lock can be granted twice after a failover
        return False, acked
    return True, acked


def run(narrator: Narrator) -> Verdict:
    narrator.section("plain token lock, primary + asynchronous replica")
    with primary_and_replica(narrator) as (primary, replica, relay):
        relay.cut()
        wait_for_link(replica, up=False)
        narrator("replication link goes down (in production: the few ms of async lag)")
        a = lockcore.create("token", client_for(primary), RESOURCE, ttl_ms=TTL_MS)
        a_got = a.acquire(blocking=False)
        narrator("A: SET %s NX PX %d on the primary -> %s, fencing token %s%s", a.key,
                 TTL_MS, "OK" if a_got else "refused", a.fencing_token,
                 "; A sells" if a_got else "")
        promoted = fail_over(narrator, primary, replica)
        narrator("new primary has %s? %s", a.key, bool(promoted.exists(a.key)))
        b = lockcore.create("token", promoted, RESOURCE, ttl_ms=TTL_MS)
        b_got = b.acquire(blocking=False)
        narrator("B: SET NX PX on the new primary -> %s, fencing token %s",
                 "OK" if b_got else "refused", b.fencing_token)
        two_holders = a_got and b_got and a.token is not None
        fences = (a.fencing_token, b.fencing_token)
        if two_holders:
            narrator("TWO HOLDERS: A (fence %s) still believes it holds the lock, B (fence "
                     "%s) holds it too", a.fencing_token, b.fencing_token)

    narrator.section(f"mitigation: WAIT 1 {WAIT_MS} after acquiring, refuse an unreplicated lock")
    with primary_and_replica(narrator) as (primary, replica, relay):
        client = client_for(primary, timeout=WAIT_MS / 1000 + 2)  # WAIT blocks up to WAIT_MS
        relay.cut()
        wait_for_link(replica, up=False)
        a = lockcore.create("token", client, RESOURCE, ttl_ms=TTL_MS)
        kept_unreplicated, acked = acquire_replicated(a, client)
        narrator("link down: A acquires, WAIT 1 %d -> %d replica(s) acked; A %s the lock",
                 WAIT_MS, acked, "keeps" if kept_unreplicated else "releases and refuses")
        relay.mend()
        wait_for_link(replica, up=True)
        kept, acked = acquire_replicated(a, client)
        narrator("link up: A acquires, WAIT 1 %d -> %d replica(s) acked; A %s the lock",
                 WAIT_MS, acked, "keeps" if kept else "refuses")
        promoted = fail_over(narrator, primary, replica)
        b = lockcore.create("token", promoted, RESOURCE, ttl_ms=TTL_MS)
        b_refused = not b.acquire(blocking=False)
        narrator("B on the new primary -> %s", "refused: the lock survived the failover"
                 if b_refused else "OK: two holders again")
        narrator("limits: WAIT proves receipt, not that the acknowledging replica is the one "
                 "promoted, nor durability across its restart; it narrows the window, "
                 "consensus (RedLock's majority, ZooKeeper) removes it")
    protected = not kept_unreplicated and kept and b_refused
    facts = {"two_holders": two_holders, "a_fence": fences[0], "b_fence": fences[1],
             "wait_refused_unreplicated": not kept_unreplicated, "wait_protected": protected}
    if two_holders and protected:
        return Verdict(True, "failover granted the lock twice (A and B both hold it); "
                       "WAIT refused the unreplicated lock and the replicated one survived",
                       facts)
    return Verdict(False, f"expected two holders, then WAIT protection; saw {facts}", facts)
