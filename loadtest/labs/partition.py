"""partition: a network partition cuts the RedLock holder off from the majority.

Seed 004's open question, made real with the kernel's network namespaces
(``netns.py``; needs root and iproute2). Five redis-servers: three on the "majority"
side (the root namespace), two on the holder's island. Client A, the holder, is a
process inside the island (``partition_holder.py``); client B lives on the majority
side. A acquires on all five; then the cable goes dark.

Nothing tells A. Its handle still has a token. On the majority side A's keys expire
after the TTL and B acquires a majority (3 of 5): two clients now act as holders. A can
find out only by *checking*: RedLock's validity time (TTL minus the time spent
acquiring, minus the time since) has run out, and it can no longer reach a majority.
A program that does not check (or a store that does not check fencing tokens) lets
both write. That is the point: a lease is only as good as the holder's discipline
about time.

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

from . import netns
from .narration import Narrator, Verdict

TITLE = "a partition isolates the RedLock holder; the majority side grants the lock again"
SEED = "004"
RESOURCE = "stock:sku-1"
TTL_MS = 2_000


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
        majority = [RedisServer(args=bind, binary=binary).start() for _ in range(3)]
        for server in majority:
            stack.callback(server.cleanup)
        minority = [island_redis(island, binary) for _ in range(2)]
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
                 "ms, validity %s ms", holder.pid, TTL_MS, acquired.get("validity_ms"))
        b = lockcore.create("redlock", b_clients, RESOURCE, ttl_ms=TTL_MS)
        b_before = b.acquire(blocking=False)
        narrator("B (majority side) tries -> %s", "OK?!" if b_before else "refused")
        island.cut()
        narrator("PARTITION: ip link set %s down (the island's end); nobody tells A",
                 island.ns_end)
        started = time.monotonic()
        b_after = b.acquire(blocking=True, timeout=TTL_MS * 3 / 1000)
        narrator("B acquires a majority %s after the cut (A's keys expired there): %s",
                 f"{(time.monotonic() - started) * 1000:.0f} ms", b_after)
        tell(holder, "check")
        check = read_event(holder)
        narrator("A: handle still has its token -> believes it holds the lock: %s",
                 check["believes"])
        narrator("A's nodes: %s", ", ".join(check["nodes"]))
        narrator("A checks validity: %s ms left -> %s", check["validity_left_ms"],
                 "EXPIRED, stop writing" if check["validity_left_ms"] <= 0 else "still valid")
        tell(holder, "exit")
        island.heal()
        if b_after:
            b.release()
    two_believers = b_after and not b_before and check["believes"]
    validity_says_lost = check["validity_left_ms"] <= 0
    facts = {"skipped": None, "b_before_cut": b_before, "b_after_cut": b_after,
             "a_believes": check["believes"], "a_validity_left_ms": check["validity_left_ms"],
             "a_nodes": check["nodes"]}
    if two_believers and validity_says_lost:
        return Verdict(True, "after the partition B holds the lock while the isolated A still "
                       "believes it does; only A's validity check tells it the lease is gone",
                       facts)
    return Verdict(False, f"expected B to acquire while A believes; saw {facts}", facts)
