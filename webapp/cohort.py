"""Lock cohorting: the buyers of one worker pass a held distributed lock among themselves.

Dice, Marathe and Shavit, "Lock Cohorting" (PPoPP 2012): put a *local* lock in front
of a global one. Only the local head contends for the global lock; when its section
ends and another local thread is queued, it hands the still-held global lock over,
which costs a greenlet switch instead of a release, a wake-up and an acquire across
processes (``lockpassing.py``). After a bound (passes and time) the cohort releases,
so the other processes get their turn (``holdbound.py``).

**Guarantee.** Exactly the distributed lock's: every section, passed or not, runs
while the distributed lock is held by this process, one section at a time (the local
queue). Each section still reads and writes the stock itself. A pass happens only
while the hold is young (``max_hold_s``, a quarter of the TTL at most), so a passed
section starts with most of the TTL left, like a fresh acquisition; and only to a buyer
whose sale has the work that TTL was sized for (a cohort per resource and TTL:
``locks.local_queue``).

**What changes.** Sections of one cohort share one acquisition, so their orders carry
the same ``fencing_token`` (a fenced store accepts an equal token: one holder may write
more than once). Fairness is per process, not per buyer: a local buyer may go ahead of
an earlier remote one, up to the bound.

**When to use it.** A hot lock contended by many requests in few processes, with short
sections: here the hand-off, not the section, bounds the sale. Only for safe locks on
one resource: ``multi`` also locks the buyer, and the unsafe seeds must keep failing.

This module holds what the rest of the app uses: ``CohortLock``, the per-purchase
handle ``locks.lock_for`` gives, and ``Cohorts``, this process's cohort per resource.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .lockpassing import Cohort


class CohortLock:
    """A per-purchase handle with the lock's interface (``acquire``, ``release``,
    ``fencing_token``) that queues in the process's cohort for the real lock."""

    def __init__(self, cohort: Cohort, make_lock: Callable[[], Any]) -> None:
        self.cohort = cohort
        self.make_lock = make_lock
        self.held: Any = None

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if self.held is not None:
            raise RuntimeError("this handle already holds the lock; locks are not reentrant")
        self.held = self.cohort.acquire(self.make_lock, blocking, timeout)
        return self.held is not None

    def release(self) -> None:
        """Pass the lock on or release it; raises ``LockNotOwned`` like the lock would."""
        held, self.held = self.held, None
        if held is None:
            from lockcore import LockNotOwned

            raise LockNotOwned("release of a lock this handle does not hold", "cohort")
        self.cohort.release(held)

    def keep(self) -> bool:
        """Whether this hold may serve one more combined batch (``Cohort.keep``)."""
        return self.held is not None and self.cohort.keep(self.held)

    @property
    def fencing_token(self) -> int | None:
        return None if self.held is None else self.held.fencing_token

    def silent_servers_since(self, since: float) -> str | None:
        """Why the cohort could not get the lock since ``since``, if the servers were the
        cause (``Cohort.silent_servers_since``)."""
        return self.cohort.silent_servers_since(since)

    def __getattr__(self, name: str) -> Any:  # name, key, strategy, lost, ... of the lock
        if self.held is None:
            raise AttributeError(name)
        return getattr(self.held, name)


class Cohorts:
    """One ``Cohort`` per lock resource and TTL (``locks.local_queue``), for this
    process (made after the fork)."""

    def __init__(self, max_passes: int, max_hold_s: float) -> None:
        self.max_passes = max_passes
        self.max_hold_s = max_hold_s
        self._mutex = threading.Lock()
        self._by_key: dict[str, Cohort] = {}
        self._combiners: dict[str, Any] = {}

    def for_key(self, key: str) -> Cohort:
        cohort = self._by_key.get(key)  # made once per key: no mutex once it is there
        if cohort is not None:
            return cohort
        with self._mutex:
            cohort = self._by_key.get(key)
            if cohort is None:
                cohort = self._by_key[key] = Cohort(self.max_passes, self.max_hold_s)
            return cohort

    def combiner_for(self, key: str, max_batch: int) -> Any:
        """The ``combining.Combiner`` of one lock resource in this process."""
        combiner = self._combiners.get(key)  # made once per key: no mutex once it is there
        if combiner is not None:
            return combiner
        from .combining import Combiner  # it builds on this module's handles

        with self._mutex:
            combiner = self._combiners.get(key)
            if combiner is None:
                combiner = self._combiners[key] = Combiner(max_batch)
            return combiner
