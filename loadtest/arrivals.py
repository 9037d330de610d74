"""The arrival log: one JSON line per purchase attempt, and what it tells about fairness.

Locust's CSVs aggregate; they cannot say *who* got a unit. A flash sale promises
first come, first served, so each buyer process appends one line per purchase attempt::

    {"user": "buyer-3f..", "attempt": 1, "sent": 1732212345.123, "done": 1732212345.301,
     "status": 201, "outcome": "order"}

``sent`` and ``done`` are wall-clock seconds, so logs of distributed workers on one
machine (or NTP-synced machines) merge. *Fairness* is the share of the first ``n``
buyers to arrive (by their first attempt) who ended up with an order: 1.0 is a perfect
queue; a lock that lets late arrivals overtake early ones (polling, backoff) scores lower.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple


class Arrival(NamedTuple):
    user: str
    attempt: int
    sent: float
    done: float
    status: int
    outcome: str


def write_arrivals(path: str | Path, arrivals: Iterable[Arrival]) -> None:
    """Append ``arrivals`` in one write: O_APPEND keeps concurrent workers' lines whole."""
    text = "".join(json.dumps(a._asdict()) + "\n" for a in arrivals)
    if text:
        with open(path, "a", encoding="utf-8") as log:
            log.write(text)


def read_arrivals(path: str | Path) -> list[Arrival]:
    """Every attempt in the log, oldest first; a missing file is an empty log."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    arrivals = [Arrival(**json.loads(line)) for line in lines if line.strip()]
    return sorted(arrivals, key=lambda a: a.sent)


def winners(arrivals: Iterable[Arrival]) -> set[str]:
    return {a.user for a in arrivals if a.outcome == "order"}


def cut_off(arrivals: Iterable[Arrival]) -> set[str]:
    """Buyers whose attempt was still unanswered when the run stopped (``"cut_off"``)."""
    return {a.user for a in arrivals if a.outcome == "cut_off"}


def fairness(arrivals: list[Arrival], first_n: int,
             served: Iterable[str] = ()) -> float | None:
    """Share of the first ``first_n`` buyers to arrive who got an order; None if nobody came.

    ``served``: buyers who got one without being told (cut off at the cap, their order
    found by the audit). Counting only the 201s, a sale whose first 10 buyers got its 10
    units scored 0.60: 4 of them were still waiting for the lock at the cap (a showdown
    audit)."""
    got = winners(arrivals) | set(served)
    first_seen: dict[str, float] = {}
    for a in arrivals:
        if a.user not in first_seen or a.sent < first_seen[a.user]:
            first_seen[a.user] = a.sent
    earliest = sorted(first_seen, key=first_seen.__getitem__)[:first_n]
    if not earliest:
        return None
    return sum(1 for user in earliest if user in got) / len(earliest)


def time_to_sell_out(arrivals: list[Arrival], stock: int) -> float | None:
    """Seconds from the first attempt to the answer that sold unit ``stock``; None if unsold.

    Counts orders, not units: the showdown buys one unit per order.
    """
    if not arrivals or stock < 1:
        return None
    done = sorted(a.done for a in arrivals if a.outcome == "order")
    if len(done) < stock:
        return None
    return done[stock - 1] - min(a.sent for a in arrivals)


def outcome_counts(arrivals: Iterable[Arrival]) -> dict[str, int]:
    return dict(Counter(a.outcome for a in arrivals))


def buyers(arrivals: Iterable[Arrival]) -> int:
    return len({a.user for a in arrivals})
