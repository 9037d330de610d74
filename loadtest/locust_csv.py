"""Read what ``locust --csv PREFIX`` writes: final stats and the per-second history.

Locust writes ``PREFIX_stats.csv`` (one row per request name plus ``Aggregated``) and
``PREFIX_stats_history.csv`` (a row per second, per name with ``--csv-full-history``).
Times are milliseconds; "N/A" appears before the first request and reads as None.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import NamedTuple

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


def read_stats(prefix: str | Path) -> dict[str, RequestStats]:
    """Rows of ``PREFIX_stats.csv`` keyed by name (``Aggregated`` for the total)."""
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
