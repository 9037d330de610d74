"""Count the Redis commands a run costs, from ``INFO commandstats`` before and after.

"Redis commands per purchase" is how a lock's price shows up on the server: a polling
lock spins GET/SET while it waits, a notify lock parks in BLPOP, RedLock talks to five
nodes, the atomic path sends one EVALSHA. Everything the shop sends during the run is
counted (browsing and the storefront too) except our own ``INFO`` calls.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)


def total_calls(clients: Sequence[Any]) -> int | None:
    """Commands served so far by all ``clients``' servers; None if unknown or unreachable."""
    if not clients:
        return None
    total = 0
    for client in clients:
        try:
            stats = client.info("commandstats")
        except Exception as exc:  # noqa: BLE001 - a missing figure must not stop the show
            logger.warning("INFO commandstats failed: %s", exc)
            return None
        for name, entry in stats.items():
            if name != "cmdstat_info" and isinstance(entry, dict):
                total += int(entry.get("calls", 0))
    return total


def per_attempt(before: int | None, after: int | None, attempts: int) -> float | None:
    if before is None or after is None or attempts <= 0:
        return None
    return (after - before) / attempts
