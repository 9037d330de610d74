"""Sustained mode's one figure: successful purchases per second in the steady window.

The issue-6 target is a ratio within one run: purchases/s of a strategy against the
rate of a no-op endpoint. The baseline is ``POST /api/noop`` driven by the very same
Locust code as a purchase (body, parse, check, arrival log: see ``locustfile.py``), and
its good answers per second are counted here exactly as orders are. A bare ``GET
/api/noop`` (the old baseline, Locust's requests/s) is still measured beside it: it
spares the load generator, which shares the two cores, the work a purchase costs it.

Both are counted over the same kind of window, so the ratio compares servers, not
ramps: the first ``WARMUP_S`` seconds
(Locust spawning 1000 users, connections opening, gunicorn's greenlets starting) and
the last second (users being stopped mid-request) are left out.

Only purchases answered 201 count (``outcome == "order"``); a 503 busy is load, not a
sale. The window is anchored on the first request *sent*, so a strategy that stalls
the shop gets no credit for a quiet start.
"""

from __future__ import annotations

from loadtest.arrivals import Arrival
from loadtest.locust_csv import HistoryPoint

#: seconds at the start of a run that are not measured
WARMUP_S = 2.0
#: seconds at the end that are not measured
COOLDOWN_S = 1.0


def orders_per_s(tried: list[Arrival], outcome: str = "order") -> float | None:
    """Orders (or the baseline's ``"noop"`` answers) completed per second inside the
    steady window of a sustained run."""
    if not tried:
        return None
    start = min(a.sent for a in tried) + WARMUP_S
    end = max(a.done for a in tried) - COOLDOWN_S
    if end - start < 1.0:  # too short to leave anything out: the whole span
        start, end = min(a.sent for a in tried), max(a.done for a in tried)
    if end <= start:
        return None
    orders = sum(1 for a in tried if a.outcome == outcome and start <= a.done <= end)
    return orders / (end - start)


def requests_per_s(points: list[HistoryPoint], fallback: float) -> float:
    """Requests per second in the steady window, from Locust's per-second history
    (cumulative counts); ``fallback`` (Locust's whole-run average) if it is too short."""
    started = [p for p in points if p.total_requests > 0]
    if not started:
        return fallback
    first = started[0].timestamp
    steady = [p for p in started if first + WARMUP_S <= p.timestamp]
    if len(steady) > 1 + COOLDOWN_S:
        steady = steady[:-int(COOLDOWN_S)]
    if len(steady) < 2 or steady[-1].timestamp <= steady[0].timestamp:
        return fallback
    return ((steady[-1].total_requests - steady[0].total_requests)
            / (steady[-1].timestamp - steady[0].timestamp))
