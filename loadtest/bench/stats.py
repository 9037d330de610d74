"""Turn the workers' raw reports into the figures the table shows.

Waits are pooled across workers before taking percentiles: p99 is "one acquisition in
a hundred waited this long", whoever it was. Fairness is the fewest acquisitions any
worker got divided by the most: 1.0 means everybody got their turn, and a lock that
lets the releaser grab it straight back shows up as a figure near 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when there are none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def per_op(total: float | None, ops: int) -> float | None:
    return None if total is None or ops == 0 else round(total / ops, 2)


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    """None when any worker could not count (ZooKeeper talks no Redis)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _us(seconds: float, ops: int) -> float | None:
    return None if ops == 0 else round(seconds * 1e6 / ops, 1)


def summarise(contender: Any, solo: list[dict[str, Any]],
              hot: list[dict[str, Any]]) -> dict[str, Any]:
    """One result row from every round's samples of one contender."""
    outcome: dict[str, Any] = {"name": contender.name, "library": contender.library,
                               "backend": contender.backend, "settings": contender.settings,
                               "errors": [e for s in solo + hot for e in s["errors"]]}
    for mode, samples, summary in [("uncontended", solo, uncontended),
                                   ("contended", hot, contended)]:
        if not samples:
            outcome[mode] = None
            continue
        merged = _merge(samples)
        outcome[mode] = summary(merged["reports"], merged["duration"], merged["commands"],
                                merged["server_cpu_s"])
    outcome["contended"]["acq_per_s_by_round"] = [
        round(sum(r["acquisitions"] for r in s["reports"]) / s["duration"], 1) for s in hot]
    return outcome


def _merge(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds added up: one report per worker, durations and server deltas summed."""
    workers: dict[int, dict[str, Any]] = {}
    for sample in samples:
        for r in sample["reports"]:
            w = workers.setdefault(r["worker"], {"worker": r["worker"], "acquisitions": 0,
                                                 "overlaps": 0, "waits": [], "cpu_s": 0.0,
                                                 "round_trips": 0, "switches": 0})
            for key in ("acquisitions", "overlaps", "cpu_s", "switches"):
                w[key] += r[key]
            w["waits"] += r["waits"]
            w["round_trips"] = _sum_or_none([w["round_trips"], r["round_trips"]])
    commands = _sum_or_none(s["commands"] for s in samples)
    return {"reports": list(workers.values()), "commands": commands,
            "duration": sum(s["duration"] for s in samples),
            "server_cpu_s": sum(s["server_cpu_s"] for s in samples)}


def uncontended(reports: list[dict[str, Any]], duration: float,
                commands: int | None, server_cpu_s: float) -> dict[str, Any]:
    """One worker's acquire+release loop. ``round_trips`` is the count itself, so that the
    "== 2" target is checked on trips / ops unrounded: ``round_trips_per_op`` is rounded
    to 2 places, and 2 x 14,466 + 50 trips over 14,466 ops read 2.0 there and met it (a
    bench audit)."""
    ops = sum(r["acquisitions"] for r in reports)
    trips = _sum_or_none(r["round_trips"] for r in reports)
    return {
        "ops": ops,
        "ops_per_s": round(ops / duration, 1),
        "round_trips": trips,
        "round_trips_per_op": per_op(trips, ops),
        "redis_commands_per_op": per_op(commands, ops),
        "client_cpu_us_per_op": _us(sum(r["cpu_s"] for r in reports), ops),
        "server_cpu_us_per_op": _us(server_cpu_s, ops),
    }


def contended(reports: list[dict[str, Any]], duration: float,
              commands: int | None, server_cpu_s: float) -> dict[str, Any]:
    """Every worker on one hot lock; ``commands`` excludes the critical section's own.

    The CPU figures include everybody's: the holder's, the waiters' (a waiter woken for
    nothing pays too) and, on the Redis side, the critical section's GET + DECR. So do
    the workers' context switches: every blocking read or sleep is one, and on a busy
    machine each switch back in costs CPU (docs/performance.md, "Session 24").
    """
    counts = [r["acquisitions"] for r in sorted(reports, key=lambda r: r["worker"])]
    acquisitions = sum(counts)
    waits = sorted(w for r in reports for w in r["waits"])
    trips = _sum_or_none(r["round_trips"] for r in reports)
    return {
        "acquisitions": acquisitions,
        "acq_per_s": round(acquisitions / duration, 1),
        "wait_ms": {"p50": _ms(percentile(waits, 0.50)), "p99": _ms(percentile(waits, 0.99)),
                    "max": _ms(waits[-1] if waits else None)},
        "per_worker": counts,
        "fairness": round(min(counts) / max(counts), 3) if counts and max(counts) else 0.0,
        "round_trips_per_acq": per_op(trips, acquisitions),
        "redis_commands_per_acq": per_op(commands, acquisitions),
        "client_cpu_us_per_acq": _us(sum(r["cpu_s"] for r in reports), acquisitions),
        "server_cpu_us_per_acq": _us(server_cpu_s, acquisitions),
        "switches_per_acq": per_op(sum(r["switches"] for r in reports), acquisitions),
        "overlaps": sum(r["overlaps"] for r in reports),
    }
