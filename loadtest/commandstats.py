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


#: commands served so far, by the position of the server's client in the list given
Calls = dict[int, int]


def total_calls(clients: Sequence[Any]) -> Calls | None:
    """Commands served so far by each of ``clients``' servers that answers (by its
    place in ``clients``); None if none was given. A server that does not answer is
    left out, once logged: one dead RedLock node blanked the figure of every strategy,
    even those that never use it (a CLI audit)."""
    if not clients:
        return None
    calls: Calls = {}
    for index, client in enumerate(clients):
        try:
            stats = client.info("commandstats")
        except Exception as exc:  # noqa: BLE001 - a missing figure must not stop the show
            if index not in _unanswered:
                logger.warning("INFO commandstats failed (left out of redis/purchase): %s",
                               exc)
                _unanswered.add(index)
            continue
        calls[index] = sum(int(entry.get("calls", 0)) for name, entry in stats.items()
                           if name != "cmdstat_info" and isinstance(entry, dict))
    return calls


#: the servers already said to be unanswering (said once a run, not every phase)
_unanswered: set[int] = set()


def per_attempt(before: Calls | None, after: Calls | None, attempts: int) -> float | None:
    """Commands per attempt on the servers that answered both before and after."""
    if before is None or after is None or attempts <= 0:
        return None
    both = before.keys() & after.keys()
    if not both:
        return None
    return sum(after[i] - before[i] for i in both) / attempts
