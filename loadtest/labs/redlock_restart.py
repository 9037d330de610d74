"""redlock-restart: a RedLock (红锁) node restarts empty and the lock is granted twice.

Seed 004's warning about RedLock itself. Five independent redis-servers, started the
way ``lockcore.embedded`` always starts them: ``--save "" --appendonly no``, nothing
on disk. To make the run deterministic, nodes 4 and 5 are down when A locks, so A's
majority is exactly nodes 1, 2, 3 (3 of 5 is still a majority: A holds the lock).
Nodes 4 and 5 come back, empty. Then node 3 crashes (SIGKILL) and restarts at once,
empty too. B asks all five: nodes 3, 4, 5 say yes. Three is a majority. A and B both
hold the lock, and A's validity time says A's lease is still good.

The fix the seed gives (and Antirez's RedLock page): a crashed node must stay down
longer than the maximum TTL before it rejoins, so every lock it forgot has expired
anyway ("delayed restarts"). Or turn on ``appendfsync always``, and pay for it on
every write. The second act replays the crash with the restart delayed past the TTL:
B is refused while A's lease lasts, and gets the lock only after it has expired.
"""

from __future__ import annotations

import time

import lockcore
from lockcore.embedded import RedisServer

from .narration import Narrator, Verdict
from .servers import client_for, lab_redis

TITLE = "a RedLock node restarts without persistence; a second client gets a majority"
SEED = "004"
RESOURCE = "stock:sku-1"
TTL_MS = 10_000
DELAYED_TTL_MS = 1_500
#: generous per-node answer time: a busy machine must not turn a "yes" into a timeout
NODE_TIMEOUT_MS = 1_000


def redlock(servers: list[RedisServer], ttl_ms: int) -> lockcore.DistributedLock:
    return lockcore.create("redlock", [client_for(s) for s in servers], RESOURCE,
                           ttl_ms=ttl_ms, node_timeout_ms=NODE_TIMEOUT_MS)


def lock_on_nodes_1_to_3(narrator: Narrator, servers: list[RedisServer], ttl_ms: int,
                         ) -> lockcore.DistributedLock:
    """A acquires while nodes 4 and 5 are down, so its majority is exactly nodes 1-3."""
    for server in servers[3:]:
        server.kill()
    a = redlock(servers, ttl_ms)
    if not a.acquire(blocking=True, timeout=5):
        raise RuntimeError("A could not acquire RedLock on nodes 1-3")
    narrator("nodes 4, 5 down; A acquires RedLock on nodes 1, 2, 3 (3/5, a majority), ttl %d ms",
             ttl_ms)
    for server in servers[3:]:
        server.start()
    narrator("nodes 4, 5 back, empty")
    return a


def holders_by_node(servers: list[RedisServer], key: str) -> str:
    values = []
    for number, server in enumerate(servers, 1):
        client = client_for(server)
        value = client.get(key)
        client.close()
        text = value.decode() if isinstance(value, bytes) else str(value)
        values.append(f"{number}:{'-' if value is None else text[:6]}")
    return " ".join(values)


def immediate_restart(narrator: Narrator, servers: list[RedisServer]) -> dict[str, object]:
    a = lock_on_nodes_1_to_3(narrator, servers, TTL_MS)
    servers[2].kill()
    servers[2].start()
    narrator("node 3 crashes (SIGKILL) and restarts at once, without persistence: empty")
    b = redlock(servers, TTL_MS)
    b_got = b.acquire(blocking=False)
    narrator("B asks all five -> %s; lock values per node %s", "OK" if b_got else "refused",
             holders_by_node(servers, a.key))
    validity_left = a.remaining_validity_ms()  # type: ignore[attr-defined]
    if b_got and a.token is not None and validity_left > 0:
        narrator("TWO HOLDERS: A (validity %.0f ms left, fencing token %s) and B (fencing "
                 "token %s): nodes 3-5 forgot A's counter too", validity_left, a.fencing_token,
                 b.fencing_token)
    narrator("only a re-check would tell A: held() asks every node -> %s", a.held())
    return {"b_got_after_immediate_restart": b_got, "a_validity_left_ms": validity_left,
            "a_fence": a.fencing_token, "b_fence": b.fencing_token}

def delayed_restart(narrator: Narrator, servers: list[RedisServer]) -> dict[str, object]:
    for server in servers:
        client_for(server).flushall()
    a = lock_on_nodes_1_to_3(narrator, servers, DELAYED_TTL_MS)
    started = time.monotonic()
    servers[2].kill()
    narrator("node 3 crashes; it stays down for the max TTL (%d ms) before rejoining",
             DELAYED_TTL_MS)
    b = redlock(servers, DELAYED_TTL_MS)
    b_refused = not b.acquire(blocking=False)
    narrator("B while node 3 is down -> %s", "refused (only 4, 5 free: 2/5)" if b_refused
             else "OK?!")
    time.sleep(max(0.0, DELAYED_TTL_MS / 1000 + 0.2 - (time.monotonic() - started)))
    servers[2].start()
    b_later = b.acquire(blocking=True, timeout=3)
    # what A's own clock says of its lease as B gets the lock: the delay is the fix only
    # if it has run out (without this, a restart not delayed at all still "prevented
    # it" in the verdict; a mutation check)
    a_left = a.remaining_validity_ms()  # type: ignore[attr-defined]
    if a_left > 0:
        narrator("node 3 rejoins; B -> %s while A's lease still has %.0f ms: TWO HOLDERS",
                 "OK" if b_later else "refused", a_left)
    else:
        narrator("node 3 rejoins after the TTL; A's lease has expired everywhere; B -> %s",
                 "OK, and only B holds it" if b_later else "refused")
    if b_later:
        b.release()
    return {"b_refused_during_delay": b_refused, "b_got_after_ttl": b_later,
            "a_validity_left_at_b_ms": a_left}


def run(narrator: Narrator) -> Verdict:
    with lab_redis(narrator, nodes=5) as servers:
        narrator.section("node 3 restarts at once, empty")
        facts = immediate_restart(narrator, servers)
        narrator.section("node 3's restart delayed past the max TTL")
        facts.update(delayed_restart(narrator, servers))
    if facts["b_got_after_immediate_restart"] and facts["a_validity_left_ms"] > 0 \
            and facts["b_refused_during_delay"] and facts["b_got_after_ttl"] \
            and facts["a_validity_left_at_b_ms"] <= 0:
        return Verdict(True, "a node restarted without persistence gave B a majority while A "
                       "held the lock; delaying the restart past the TTL prevented it", facts)
    return Verdict(False, f"expected two holders, then a refusal; saw {facts}", facts)
