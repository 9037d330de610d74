"""Lock cohorting: the buyers of one worker pass a held distributed lock among themselves.

Dice, Marathe and Shavit, "Lock Cohorting" (PPoPP 2012): put a *local* lock in front
of a global one. Only the local head contends for the global lock; when its section
ends and another local thread is queued, it hands the still-held global lock over,
which costs a greenlet switch instead of a release, a wake-up and an acquire across
processes. After a bound (passes and time) the cohort releases, so the other
processes get their turn.

**Guarantee.** Exactly the distributed lock's: every section, passed or not, runs
while the distributed lock is held by this process, one section at a time (the local
queue). Each section still reads and writes the stock itself. A pass happens only
while the hold is young (``max_hold_s``, a quarter of the TTL at most), so a passed
section starts with most of the TTL left, like a fresh acquisition.

**Failure timeline** the bound prevents::

    worker 1: acquires; passes 1, 2, 3, ... to its own buyers, never releasing
    worker 2: its buyers wait, time out: 503 busy for half the shop   <- unbounded
    bounded:  after max_passes or max_hold_s worker 1 releases; worker 2's head,
              blocked in BLPOP, is woken and its cohort runs next

**What changes.** Sections of one cohort share one acquisition, so their orders carry
the same ``fencing_token`` (a fenced store accepts an equal token: one holder may write
more than once). Fairness is per process, not per buyer: a local buyer may go ahead of
an earlier remote one, up to the bound.

**When to use it.** A hot lock contended by many requests in few processes, with short
sections: here the hand-off, not the section, bounds the sale. Only for safe locks on
one resource: ``multi`` also locks the buyer, and the unsafe seeds must keep failing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class _Turn:
    """One queued buyer: woken with the held lock (a pass) or with ``None`` (lead)."""

    __slots__ = ("event", "lock")

    def __init__(self) -> None:
        self.event = threading.Event()  # cooperative once gevent has patched threading
        self.lock: Any = None


class Cohort:
    """The local queue in front of one distributed lock, in one process."""

    def __init__(self, max_passes: int, max_hold_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_passes = max_passes
        self.max_hold_s = max_hold_s
        self.monotonic = monotonic
        self._mutex = threading.Lock()
        self._queue: deque[_Turn] = deque()
        self._busy = False  # someone here holds the distributed lock or is acquiring it
        self._acquired_at = 0.0
        self._passes = 0
        #: acquisitions of the distributed lock and local passes (for tests and logs)
        self.acquisitions = 0
        self.passes = 0

    def acquire(self, make_lock: Callable[[], Any], blocking: bool, timeout: float | None) -> Any:
        """The held lock (acquired by us, or passed to us), or None when not in time."""
        deadline = None if timeout is None else self.monotonic() + timeout
        with self._mutex:
            if not self._busy:
                self._busy = True
                turn = None
            elif not blocking:
                return None
            else:
                turn = _Turn()
                self._queue.append(turn)
        if turn is not None:
            left = None if deadline is None else max(0.0, deadline - self.monotonic())
            if not turn.event.wait(left):
                with self._mutex:
                    if turn in self._queue:  # nobody handed us anything: give up
                        self._queue.remove(turn)
                        return None
                turn.event.wait()  # handed over while we timed out: take it
            if turn.lock is not None:
                return turn.lock
        return self._lead(make_lock, blocking, deadline)

    def _lead(self, make_lock: Callable[[], Any], blocking: bool,
              deadline: float | None) -> Any:
        """Acquire the distributed lock for the cohort; on failure the next one leads."""
        lock = None
        try:
            lock = make_lock()
            if not blocking:
                got = lock.acquire(blocking=False)
            else:
                left = None if deadline is None else max(0.0, deadline - self.monotonic())
                got = lock.acquire(blocking=True, timeout=left)
        except BaseException:
            self._next_leads()
            raise
        if not got:
            self._next_leads()
            return None
        with self._mutex:
            self._acquired_at, self._passes = self.monotonic(), 0
            self.acquisitions += 1
        return lock

    def release(self, lock: Any) -> None:
        """End a section: pass ``lock`` to the next local buyer, or release it."""
        with self._mutex:
            if self._queue and self._may_pass(lock):
                turn = self._queue.popleft()
                self._passes += 1
                self.passes += 1
                turn.lock = lock
                turn.event.set()
                return
        try:
            lock.release()
        finally:
            self._next_leads()

    def keep(self, lock: Any) -> bool:
        """Whether the holder may run one more section itself (a combined batch,
        ``combining.py``) on its hold: within the pass bounds, counted as a pass, and
        only while nobody else of this worker queues here (they get the pass)."""
        with self._mutex:
            if self._queue or not self._may_pass(lock):
                return False
            self._passes += 1
            self.passes += 1
            return True

    def _may_pass(self, lock: Any) -> bool:
        if self._passes >= self.max_passes or getattr(lock, "lost", False):
            return False
        hold = self.max_hold_s
        ttl_ms = getattr(lock, "ttl_ms", None)
        if ttl_ms:  # a pass must leave most of the TTL to the section it starts
            hold = min(hold, ttl_ms / 4000)
        if self.monotonic() - self._acquired_at >= hold:
            return False
        validity = getattr(lock, "remaining_validity_ms", None)  # redlock's clock
        return validity is None or validity() > 2 * hold * 1000

    def _next_leads(self) -> None:
        with self._mutex:
            if self._queue:
                self._queue.popleft().event.set()  # lock None: acquire it yourself
            else:
                self._busy = False


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

    def __getattr__(self, name: str) -> Any:  # name, key, strategy, lost, ... of the lock
        if self.held is None:
            raise AttributeError(name)
        return getattr(self.held, name)


class Cohorts:
    """One ``Cohort`` per lock resource, for this process (made after the fork)."""

    def __init__(self, max_passes: int, max_hold_s: float) -> None:
        self.max_passes = max_passes
        self.max_hold_s = max_hold_s
        self._mutex = threading.Lock()
        self._by_key: dict[str, Cohort] = {}
        self._combiners: dict[str, Any] = {}

    def for_key(self, key: str) -> Cohort:
        with self._mutex:
            cohort = self._by_key.get(key)
            if cohort is None:
                cohort = self._by_key[key] = Cohort(self.max_passes, self.max_hold_s)
            return cohort

    def combiner_for(self, key: str, max_batch: int) -> Any:
        """The ``combining.Combiner`` of one lock resource in this process."""
        from .combining import Combiner  # it builds on this module's handles

        with self._mutex:
            combiner = self._combiners.get(key)
            if combiner is None:
                combiner = self._combiners[key] = Combiner(max_batch)
            return combiner
