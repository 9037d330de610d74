"""One benchmark run: start our own servers, measure every contender, return the figures.

All contenders share one run on purpose. On a shared 2-core machine absolute figures
swing with whatever else runs; ratios between locks measured minutes apart on the same
servers, by the same worker processes, are what can be compared. Each contender gets
freshly flushed servers (ours: we started them) and the same stock key.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import redis

from lockcore.embedded import EmbeddedRedis
from lockcore.zkserver import any_answers
from webapp.config import ConfigError, check_zookeeper_hosts, zookeeper_hosts

from . import stats
from .contenders import Contender, by_name
from .counting import commands_total, process_cpu, server_cpu
from .pool import START_METHODS, WorkerPool, WorkersStuck, worker_layout

logger = logging.getLogger(__name__)

STOCK_KEY = "bench:stock"
INITIAL_STOCK = 10**9


@dataclass
class BenchConfig:
    duration: float = 5.0  # contended window, seconds
    uncontended: float = 2.0  # uncontended window, seconds
    processes: int = 8
    only: list[str] | None = None
    rounds: int = 1  # each contender measured this many times, round-robin
    experimental: bool = False  # add the prototypes of experiments.py
    start_method: str = START_METHODS[0]  # how the workers start (pool.py)


def run(config: BenchConfig) -> dict[str, Any]:
    chosen = by_name(config.only, config.experimental)
    skipped = [{"name": c.name, "reason": r} for c in chosen if (r := c.unavailable())]
    runnable = [c for c in chosen if not c.unavailable()]
    with ExitStack() as stack:
        single = stack.enter_context(EmbeddedRedis(1))
        backends: dict[str, Any] = {"redis": single.urls[0]}
        if any(c.backend == "redlock" for c in runnable):
            backends["redlock"] = stack.enter_context(EmbeddedRedis(5)).urls
        if any(c.backend == "zookeeper" for c in runnable):
            hosts, why, zk_pid = _zookeeper(stack)
            if hosts:
                backends["zookeeper"] = hosts
                backends["zookeeper_pid"] = zk_pid
            else:
                skipped += [{"name": c.name, "reason": why}
                            for c in runnable if c.backend == "zookeeper"]
                runnable = [c for c in runnable if c.backend != "zookeeper"]
        load_before = os.getloadavg()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        pool = stack.enter_context(WorkerPool(config.processes, config.start_method))
        samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for contender, mode, workers, duration in schedule(runnable, config):
            logger.info("benchmarking %s (%s, %.2fs)", contender.name, mode, duration)
            try:
                sample = _measure(pool, contender, backends, mode, workers, duration)
            except WorkersStuck as exc:  # the others still deserve a run
                sample = {"reports": [], "errors": [f"{mode}: {exc}"], "commands": None,
                          "server_cpu_s": 0.0, "duration": duration}
                pool.close()
                pool = stack.enter_context(WorkerPool(config.processes, config.start_method))
            samples.setdefault((contender.name, mode), []).append(sample)
        with redis.Redis.from_url(backends["redis"]) as client:
            version = client.info("server")["redis_version"]
    results = [stats.summarise(c, samples.get((c.name, "uncontended"), []),
                               samples[c.name, "contended"]) for c in runnable]
    machine = _machine(version, load_before, started)
    machine["worker_layout"] = worker_layout(config.start_method)
    if "zookeeper" in backends:  # ours (its CPU counted), or ZOOKEEPER_HOSTS' (not)
        machine["zookeeper"] = "embedded" if backends.get("zookeeper_pid") else "external"
        machine["zookeeper_hosts"] = backends["zookeeper"]
    return {"machine": machine, "config": asdict(config), "results": results,
            "skipped": skipped}


#: each round's solo window is cut into this many slices, taken in turn by every contender
SOLO_SLICES = 4


def schedule(contenders: list[Contender], config: BenchConfig
             ) -> list[tuple[Contender, str, int, float]]:
    """(contender, mode, workers, seconds) in the order they run.

    Round-robin, so a burst of outside load hurts every contender a little rather than
    one contender a lot. Solo figures differ by a few percent between locks, less than
    a burst moves them, so each round's solo window is sliced and interleaved
    (A B C A B C ...), then come the contended windows.
    """
    plan: list[tuple[Contender, str, int, float]] = []
    solo = [c for c in contenders if not c.lock_free]
    for _ in range(config.rounds):
        for _ in range(SOLO_SLICES):
            plan += [(c, "uncontended", 1, config.uncontended / SOLO_SLICES) for c in solo]
        plan += [(c, "contended", config.processes, config.duration) for c in contenders]
    return plan


def _measure(pool: WorkerPool, contender: Contender, backends: dict[str, Any], mode: str,
             workers: int, duration: float) -> dict[str, Any]:
    """One window of one contender: the workers' reports and the servers' deltas."""
    every = [redis.Redis.from_url(u) for u in [backends["redis"], *backends.get("redlock", [])]]
    lock_servers = {"redis": every[:1], "redlock": every[1:], "zookeeper": []}[contender.backend]
    for client in every:
        client.flushall()
    every[0].set(STOCK_KEY, INITIAL_STOCK)
    spec = {"contender": contender.name, "mode": mode, "backends": backends,
            "lock_name": f"bench:{contender.name}", "stock_key": STOCK_KEY}
    reports, errors, before = pool.run(spec, workers, duration,
                                       partial(_snapshot, lock_servers, every, backends))
    after = _snapshot(lock_servers, every, backends)
    for client in every:
        client.close()
    commands = after[0] - before[0] if lock_servers else None
    if commands is not None and mode == "contended" and contender.backend == "redis" \
            and not contender.lock_free:
        commands -= 2 * sum(r["acquisitions"] for r in reports)  # the GET + DECR
    if contender.backend == "zookeeper":  # no Redis round trips to count
        for report in reports:
            report["round_trips"] = None
    return {"reports": reports, "errors": [f"{mode}: {e}" for e in errors],
            "commands": commands, "server_cpu_s": after[1] - before[1], "duration": duration}


def _snapshot(lock_servers: list[redis.Redis], every: list[redis.Redis],
              backends: dict[str, Any]) -> tuple[int, float]:
    """Commands run by the lock's servers; CPU used by all our servers (ZooKeeper too)."""
    return commands_total(lock_servers), server_cpu(every) + process_cpu(
        backends.get("zookeeper_pid"))


def _zookeeper(stack: ExitStack) -> tuple[str | None, str, int | None]:
    hosts = zookeeper_hosts()
    if hosts:  # not ours: its CPU is not ours to count
        try:  # a string kazoo cannot read is no "nothing listens there"
            check_zookeeper_hosts(hosts)
        except ConfigError as exc:
            return None, str(exc), None
        if not any_answers(hosts, 2.0):  # each window waited out kazoo's 30 s start, then
            return None, f"ZOOKEEPER_HOSTS={hosts}: nothing listens there", None  # failed
        return hosts, "", None
    try:
        from lockcore.zkserver import ZooKeeperServer

        server = ZooKeeperServer().start()
    except Exception as exc:  # ImportError, ZooKeeperUnavailable, a JVM that won't start
        return None, f"ZooKeeper unavailable: {type(exc).__name__}: {exc}", None
    stack.callback(server.stop)
    return str(server.hosts), "", server.pid


def _machine(redis_version: str, load_before: tuple[float, float, float],
             started: str) -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": sys.version.split()[0],
            "platform": platform.platform(), "redis": redis_version,
            "date": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
