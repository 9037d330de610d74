"""Read what ``locust --csv PREFIX`` writes: final stats and the per-second history.

Locust writes ``PREFIX_stats.csv`` (one row per request name plus ``Aggregated``) and
``PREFIX_stats_history.csv`` (a row per second, per name with ``--csv-full-history``).
Times are milliseconds; "N/A" appears before the first request and reads as None.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

AGGREGATED = "Aggregated"


class RequestStats(NamedTuple):
    method: str
    name: str
    requests: int
    failures: int
    rps: float
    p50: float | None
    p95: float | None
    p99: float | None


class HistoryPoint(NamedTuple):
    timestamp: int
    users: int
    total_requests: int


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def final_path(prefix: str | Path) -> Path:
    """Where the locustfile writes the final stats (``--seckill-final-stats``)."""
    return Path(f"{prefix}_final.json")


def write_final(path: str | Path, stats: Any) -> None:
    """Locust's ``stats`` (a ``RequestStats``) as it quits, in ``read_stats``'s terms:
    what the ``--csv`` file would say had Locust written it once more (it writes every
    second, and not as it quits: a run's last second was missing)."""
    def row(entry: Any) -> dict[str, Any]:
        def percentile(share: float) -> float | None:
            return entry.get_response_time_percentile(share) if entry.num_requests else None
        return {"method": entry.method or "", "name": entry.name,
                "requests": entry.num_requests, "failures": entry.num_failures,
                "rps": entry.total_rps, "p50": percentile(0.5), "p95": percentile(0.95),
                "p99": percentile(0.99)}

    rows = [row(entry) for entry in stats.entries.values()]
    rows.append({**row(stats.total), "name": AGGREGATED, "method": ""})
    point = {"timestamp": int(time.time()), "total_requests": stats.total.num_requests}
    Path(path).write_text(json.dumps({"rows": rows, "last": point}, indent=1),
                          encoding="utf-8")


def _read_final(prefix: str | Path) -> dict[str, Any] | None:
    try:
        found = json.loads(final_path(prefix).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def read_stats(prefix: str | Path) -> dict[str, RequestStats]:
    """Rows of the final stats (``final_path``), else of ``PREFIX_stats.csv``, keyed by
    name (``Aggregated`` for the total)."""
    final = _read_final(prefix)
    if final is not None:
        return {row["name"]: RequestStats(**row) for row in final["rows"]}
    path = Path(f"{prefix}_stats.csv")
    if not path.exists():
        return {}
    rows: dict[str, RequestStats] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows[row["Name"]] = RequestStats(
                method=row["Type"], name=row["Name"],
                requests=int(row["Request Count"]), failures=int(row["Failure Count"]),
                rps=_number(row["Requests/s"]) or 0.0,
                p50=_number(row["50%"]), p95=_number(row["95%"]), p99=_number(row["99%"]))
    return rows


def read_history(prefix: str | Path, name: str = AGGREGATED) -> list[HistoryPoint]:
    """One point per second for ``name``: the cumulative request count at that second."""
    path = Path(f"{prefix}_stats_history.csv")
    if not path.exists():
        return []
    points: dict[int, HistoryPoint] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["Name"] == name:
                t = int(row["Timestamp"])
                points[t] = HistoryPoint(t, int(row["User Count"]),
                                         int(row["Total Request Count"]))
    final = _read_final(prefix) if name == AGGREGATED else None
    # only a later second: in the CSV's last one it would count up to two seconds' worth
    if final is not None and points and final["last"]["timestamp"] > max(points):
        # the count as Locust quit, which the CSV had not got yet (its users: the last
        # row's; they were being stopped)
        t = int(final["last"]["timestamp"])
        points[t] = HistoryPoint(t, points[max(points)].users,
                                 int(final["last"]["total_requests"]))
    return [points[t] for t in sorted(points)]


def throughput(points: list[HistoryPoint]) -> list[tuple[float, float]]:
    """(seconds since the first point, requests/s in the second before) from the counts."""
    if not points:
        return []
    start = points[0].timestamp
    series = []
    for before, after in zip(points, points[1:], strict=False):
        elapsed = max(after.timestamp - before.timestamp, 1)
        series.append((float(after.timestamp - start),
                       (after.total_requests - before.total_requests) / elapsed))
    return series
