"""partition: a network partition cuts the RedLock holder off from the majority.

Seed 004's open question, made real with the kernel's network namespaces
(``netns.py``; needs root and iproute2). Five redis-servers: three on the "majority"
side (the root namespace), two on the holder's island. Client A, the holder, is a
process inside the island (``partition_holder.py``); client B lives on the majority
side. A acquires on all five and, as a holder of a long job does, renews every ttl/3.

First the control: past A's ttl, B is refused. The renewals keep A's keys on every
node; without them B would now win, cable or no cable. Then the cable goes dark.

Nothing tells A. Its renewals now reach only the island's two nodes, so its keys
expire on the majority side, one TTL after its last renewal there, and B acquires
those three: two clients now act as holders, each with exactly its own side's nodes.
A's handle still has a token, and its two nodes still say the lock is A's. A can find
out only by *checking*: RedLock's validity time (the last renewal that reached a
majority, minus the time since) has run out, and lockcore marked the lock lost when a
renewal reached no majority. A program that does not check (or a store that does not
check fencing tokens) lets both write. That is the point: a lease is only as good as
the holder's discipline about time.

The verdict rests on what only the cut makes: B refused before it, B holding exactly
the majority's nodes after it while A reaches none of them and still holds its own.
(With a cable that never goes dark, A's renewals keep B out: tested.)

Elsewhere (not root, no ``ip``, namespaces refused) the lab does not pretend: its
verdict says SKIPPED and why, and ``seckill scenario partition`` exits 1 (not
demonstrated); ``facts["skipped"]`` carries the reason for the tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockcore
from lockcore.embedded import RedisServer, find_redis_server, free_port, ping
from lockcore.errors import LockNotOwned

from . import netns
from .narration import Narrator, Verdict
from .partition_holder import node_view

TITLE = "a partition isolates the RedLock holder; the majority side grants the lock again"
SEED = "004"
RESOURCE = "stock:sku-1"
TTL_MS = 2_000
#: how long A holds (renewing) before B's first try: past the ttl it acquired with
CONTROL_MS = TTL_MS * 3 // 2
#: the nodes' order, A's urls and B's clients alike: the majority's three, then the island's
MAJORITY, ISLAND = 3, 2


def island_redis(island: netns.Island, binary: str) -> int:
    """A redis-server inside the island, reachable on its veth address; returns its port."""
    port = free_port()
    island.spawn([binary, "--port", str(port), "--bind", "127.0.0.1", island.ns_ip,
                  "--protected-mode", "no", "--save", "", "--appendonly", "no"],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not ping(port, host=island.ns_ip):
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis-server in {island.name} did not start on {port}")
        time.sleep(0.02)
    return port


def read_event(holder: subprocess.Popen[str], timeout: float = 15) -> dict[str, Any]:
    """The holder's next JSON line (bounded: a silent holder is a broken lab)."""
    assert holder.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = holder.stdout.readline()
        if line.startswith("{"):
            event: dict[str, Any] = json.loads(line)
            return event
        if not line and holder.poll() is not None:
            break
    raise RuntimeError("the holder process did not answer")


def tell(holder: subprocess.Popen[str], command: str) -> None:
    assert holder.stdin is not None
    holder.stdin.write(command + "\n")
    holder.stdin.flush()


def run(narrator: Narrator) -> Verdict:
    reason = netns.unsupported()
    if reason is not None:
        narrator("cannot build a real partition here: %s", reason)
        return Verdict(False, f"SKIPPED: {reason}", {"skipped": reason})
    with ExitStack() as stack:
        island = stack.enter_context(netns.Island())
        narrator("namespace %s: veth %s (majority side) <-> %s (island)", island.name,
                 island.host_ip, island.ns_ip)
        binary = find_redis_server()
        bind = ["--bind", "127.0.0.1", island.host_ip, "--protected-mode", "no"]
        majority = [RedisServer(args=bind, binary=binary).start() for _ in range(MAJORITY)]
        for server in majority:
            stack.callback(server.cleanup)
        minority = [island_redis(island, binary) for _ in range(ISLAND)]
        narrator("majority redis ports %s; island redis ports %s",
                 [s.port for s in majority], minority)
        a_urls = [f"redis://{island.host_ip}:{s.port}" for s in majority] + \
                 [f"redis://127.0.0.1:{p}" for p in minority]
        # no client-side retries: an unreachable node must cost one timeout, not redis-py's
        # backoff schedule (seconds), or B's attempts outlive the TTL they measure
        b_clients = [redis.Redis(host=host, port=port, socket_timeout=0.2,
                                 socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
                     for host, port in [("127.0.0.1", s.port) for s in majority]
                     + [(island.ns_ip, p) for p in minority]]
        for client in b_clients:
            stack.callback(client.close)
        holder = island.spawn(
            [sys.executable, "-m", "loadtest.labs.partition_holder", "--urls",
             ",".join(a_urls), "--resource", RESOURCE, "--ttl-ms", str(TTL_MS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        acquired = read_event(holder)
        narrator("A (pid %s, inside the island) acquires RedLock across both sides, ttl %d "
                 "ms, validity %s ms; it renews every %s ms", holder.pid, TTL_MS,
                 acquired.get("validity_ms"), acquired.get("renew_every_ms"))
        time.sleep(CONTROL_MS / 1000)
        tell(holder, "check")
        before = read_event(holder)
        narrator("%d ms later, past the ttl: A renewed %s times; A's nodes: %s", CONTROL_MS,
                 before["renewed"], ", ".join(before["nodes"]))
        b = lockcore.create("redlock", b_clients, RESOURCE, ttl_ms=TTL_MS)
        b_before = b.acquire(blocking=False)
        narrator("B (majority side) tries -> %s", "OK?!" if b_before else "refused")
        island.cut()
        narrator("PARTITION: ip link set %s down (the island's end); nobody tells A",
                 island.ns_end)
        started = time.monotonic()
        b_after = b.acquire(blocking=True, timeout=TTL_MS * 3 / 1000)
        narrator("B acquires a majority %s after the cut (A's renewals stopped reaching it): "
                 "%s", f"{(time.monotonic() - started) * 1000:.0f} ms", b_after)
        b_nodes = [node_view(client, b.key, b.token) for client in b_clients]
        narrator("B's view of the nodes: %s", ", ".join(b_nodes))
        tell(holder, "check")
        check = read_event(holder)
        failed = check["renewals_failed"] - before["renewals_failed"]
        narrator("A: handle still has its token -> believes it holds the lock: %s",
                 check["believes"])
        narrator("A's view of the nodes: %s", ", ".join(check["nodes"]))
        narrator("A's renewals since the cut: %d failed (no majority); lockcore marked the "
                 "lock lost: %s", failed, check["told_lost"])
        narrator("A checks validity: %s ms left -> %s", check["validity_left_ms"],
                 "EXPIRED, stop writing" if check["validity_left_ms"] <= 0 else "still valid")
        tell(holder, "exit")
        island.heal()
        if b_after:
            try:
                b.release()
            except LockNotOwned as exc:  # a slow machine: B's own keys expired first
                narrator("B's release: %s", exc)
    facts = {"skipped": None, "a_renewed_past_ttl": before["renewed"] > 0,
             "a_nodes_before_cut": before["nodes"], "b_before_cut": b_before,
             "b_after_cut": b_after, "b_nodes": b_nodes, "a_nodes": check["nodes"],
             "a_renewals_failed_after_cut": failed, "a_believes": check["believes"],
             "a_told_lost": check["told_lost"],
             "a_validity_left_ms": check["validity_left_ms"]}
    if demonstrated(facts):
        return Verdict(True, "renewing, A kept B out past the ttl; after the partition B "
                       "holds the majority side's nodes while the isolated A still holds the "
                       "island's and believes it holds the lock; only A's own checks (its "
                       "failed renewals, its validity time) tell it the lease is gone", facts)
    return Verdict(False, f"expected B refused before the cut, then B on the majority side "
                   f"while A believes; saw {facts}", facts)


def demonstrated(facts: dict[str, Any]) -> bool:
    """Facts only the cut produces, after a control that shows A's renewals working:
    before it A's keys outlived the ttl on all five nodes and B was refused; after it B
    holds exactly the majority's nodes, which A cannot reach, A still holds the island's,
    believes, and its own checks (failed renewals, validity) say the lease is gone."""
    mine, unreachable = "mine", "unreachable"
    return bool(
        facts["a_renewed_past_ttl"] and facts["a_nodes_before_cut"] == [mine] * 5
        and not facts["b_before_cut"] and facts["b_after_cut"]
        and facts["b_nodes"] == [mine] * MAJORITY + [unreachable] * ISLAND
        and facts["a_nodes"] == [unreachable] * MAJORITY + [mine] * ISLAND
        and facts["a_believes"] and facts["a_renewals_failed_after_cut"] >= 1
        and facts["a_told_lost"] and facts["a_validity_left_ms"] <= 0)
