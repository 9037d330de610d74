"""The comparison table, and the issue's targets checked as ratios within this one run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COLUMNS: list[tuple[str, int, Callable[[dict[str, Any]], Any]]] = [
    # header, width, how to get it from one result
    ("contender", 18, lambda r: r["name"]),
    ("backend", 9, lambda r: r["backend"]),
    ("solo op/s", 9, lambda r: _get(r, "uncontended", "ops_per_s")),
    ("rt/op", 5, lambda r: _get(r, "uncontended", "round_trips_per_op")),
    ("acq/s", 7, lambda r: _get(r, "contended", "acq_per_s")),
    ("p50 ms", 7, lambda r: _get(r, "contended", "wait_ms", "p50")),
    ("p99 ms", 7, lambda r: _get(r, "contended", "wait_ms", "p99")),
    ("max ms", 7, lambda r: _get(r, "contended", "wait_ms", "max")),
    ("fair", 5, lambda r: _get(r, "contended", "fairness")),
    ("rt/acq", 6, lambda r: _get(r, "contended", "round_trips_per_acq")),
    ("cmd/acq", 7, lambda r: _get(r, "contended", "redis_commands_per_acq")),
    ("cpu us/acq", 10, lambda r: _cpu(r)),
    ("cs/acq", 6, lambda r: _get(r, "contended", "switches_per_acq")),
    ("overlap", 7, lambda r: _get(r, "contended", "overlaps")),
]


def _cpu(result: dict[str, Any]) -> float | None:
    """Client + server CPU per contended acquisition (the servers: Redis, our ZooKeeper)."""
    client = _get(result, "contended", "client_cpu_us_per_acq")
    server = _get(result, "contended", "server_cpu_us_per_acq")
    return None if client is None or server is None else float(client + server)


def _get(result: dict[str, Any], *path: str) -> Any:
    value: Any = result
    for part in path:
        if not isinstance(value, dict) or value.get(part) is None:
            return None
        value = value[part]
    return value


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:,.0f}" if value >= 100 else f"{value:.2f}".rstrip("0").rstrip(".")
    else:
        text = str(value)
    return text.rjust(width)


def table(results: list[dict[str, Any]]) -> str:
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w, _) in enumerate(COLUMNS))]
    for result in results:
        cells = [_cell(get(result), w) for _, w, get in COLUMNS]
        cells[0] = str(result["name"]).ljust(COLUMNS[0][1])
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _ratio(a: Any, b: Any) -> float | None:
    """Unrounded: a target is checked on the figure itself (1.495x rounded to 1.5 first
    passed ">= 1.5"); it is rounded only to be shown."""
    return None if a is None or not b else a / b


def _fairness(counts: Any) -> float | None:
    """fewest / most acquisitions per worker, unrounded (the result's is to 3 places)."""
    return min(counts) / max(counts) if counts and max(counts) else None


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's goals that this run's contenders let us check."""
    by = {r["name"]: r for r in results}

    def val(name: str, *path: str) -> Any:
        if name not in by:
            return None
        if path[0] == "contended" and not _get(by[name], "contended", "acquisitions"):
            return None  # nothing measured (a run too short): no figure, not a miss
        return _get(by[name], *path)

    checks: list[tuple[str, Any, Callable[[Any], bool]]] = [
        ("token-notify acq/s / python-redis-lock acq/s >= 1.5",
         _ratio(val("token-notify", "contended", "acq_per_s"),
                val("python-redis-lock", "contended", "acq_per_s")), lambda v: v >= 1.5),
        ("token-notify fairness >= 0.8",
         _fairness(val("token-notify", "contended", "per_worker")), lambda v: v >= 0.8),
        ("token-notify p99 wait / python-redis-lock p99 wait <= 1",
         _ratio(val("token-notify", "contended", "wait_ms", "p99"),
                val("python-redis-lock", "contended", "wait_ms", "p99")), lambda v: v <= 1),
        ("fair acq/s / python-redis-lock acq/s >= 1",
         _ratio(val("fair", "contended", "acq_per_s"),
                val("python-redis-lock", "contended", "acq_per_s")), lambda v: v >= 1),
        ("redlock acq/s / pottery acq/s >= 5",
         _ratio(val("redlock", "contended", "acq_per_s"),
                val("pottery", "contended", "acq_per_s")), lambda v: v >= 5),
        ("token uncontended round trips per acquire+release == 2",
         _ratio(val("token-notify", "uncontended", "round_trips"),
                val("token-notify", "uncontended", "ops")), lambda v: v == 2),
        ("token-notify uncontended op/s / redis-py op/s >= 0.95",
         _ratio(val("token-notify", "uncontended", "ops_per_s"),
                val("redis-py", "uncontended", "ops_per_s")), lambda v: v >= 0.95),
    ]
    return [{"target": text, "value": None if value is None else round(value, 3),
             "met": None if value is None else ok(value)}
            for text, value, ok in checks]


#: how the header names the workers' address layout (pool.worker_layout)
LAYOUTS = {"own": ", each at its own addresses (ASLR)",
           "shared": ", all at the same addresses (no ASLR between them)"}


def render(outcome: dict[str, Any]) -> str:
    m = outcome["machine"]
    c = outcome["config"]
    lines = [f"seckill bench  {m['date']}  {m['cpu']} x{m['cores']}  Python {m['python']}  "
             f"Redis {m['redis']}  load {m['loadavg_before']} -> {m['loadavg_after']}",
             f"contended: {c['processes']} process{'es' if c['processes'] != 1 else ''} "
             f"x {c['duration']}s on one lock, "
             f"critical section GET+DECR; solo: 1 process x {c['uncontended']}s; "
             f"{c['rounds']} round(s); workers started by {c.get('start_method', 'spawn')}"
             f"{LAYOUTS.get(m.get('worker_layout', ''), '')}",
             "",
             table(outcome["results"]), ""]
    if m.get("zookeeper") == "external":  # its CPU is another machine's, or not ours
        lines.insert(2, f"ZooKeeper: ZOOKEEPER_HOSTS={m.get('zookeeper_hosts', '?')}, not "
                        "started here: the zookeeper rows' cpu us/acq leave its CPU out")
    for t in outcome["targets"]:
        verdict = {True: "met ", False: "MISS", None: "n/a "}[t["met"]]
        value = "not measured here" if t["value"] is None else t["value"]
        lines.append(f"  [{verdict}] {t['target']}: {value}")
    for s in outcome["skipped"]:
        lines.append(f"  skipped {s['name']}: {s['reason']}")
    for r in outcome["results"]:
        for error in r["errors"]:
            lines.append(f"  ERROR {r['name']}: {error}")
    return "\n".join(lines)
