"""A cohort's local queue: one worker's buyers pass a held distributed lock among themselves.

The queue in front of one distributed lock, in one process (``cohort.py`` tells why).
Only its head contends for the distributed lock; the others wait on an Event, which
costs them no Redis connection and no round trip.

**Algorithm** (one ``Cohort`` per lock resource and TTL per worker: ``locks.local_queue``)::

    acquire:  nobody here holds the lock or is acquiring it: lead, acquire it across
              processes with the caller's deadline; else queue a turn and wait
    release:  a turn is queued and the bound allows (``holdbound.py``): hand it the
              still-held lock, a greenlet switch; else release the lock and wake the
              oldest turn with nothing, so it leads and acquires the lock itself
    keep:     no turn is queued and the bound allows: the holder serves one more
              combined batch itself (``combining.py``), counted as a pass

**Failure timelines** the hand-overs prevent::

    buyer 1:  leads; Redis refuses the lock in time, or raises
    buyer 2:  queued behind it, waits for a hand-over that never comes, and so does
              every later buyer of this worker, while nobody holds anything
    handled:  a head that does not get the lock wakes the next turn to lead

    buyer 1:  releases and hands the held lock to buyer 2 as buyer 2's wait runs out
    buyer 2:  leaves with "not in time": nobody will release the lock, and the later
              buyers of this worker queue behind a holder that is gone
    handled:  a turn leaves only if still queued; else it takes what it was handed
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .holdbound import HoldBound
from .problems import silent_servers


class _Turn:
    """One queued buyer: woken with the held lock (a pass) or with ``None`` (lead)."""

    __slots__ = ("event", "lock")

    def __init__(self) -> None:
        self.event = threading.Event()  # cooperative once gevent has patched threading
        self.lock: Any = None


#: a leader with less time than this left when it began (it queued behind the previous
#: one until its own deadline was nearly gone) may not reach any lock server
NO_TIME_S = 0.05


class Cohort:
    """The local queue in front of one distributed lock, in one process."""

    def __init__(self, max_passes: int, max_hold_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._bound = HoldBound(max_passes, max_hold_s, monotonic)
        self._mutex = threading.Lock()
        self._queue: deque[_Turn] = deque()
        self._busy = False  # someone here holds the distributed lock or is acquiring it
        #: acquisitions of the distributed lock and local passes (for tests and logs)
        self.acquisitions = 0
        self.passes = 0
        #: why a try for the distributed lock failed lately, if its servers were the
        #: cause ("3 of 5 lock servers did not answer": ``problems.silent_servers``),
        #: and when; and the lock the leader is trying now (``silent_servers_since``)
        self._silent: str | None = None
        self._silent_at = float("-inf")
        self._trying: Any = None

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
        lock, left = None, None
        try:
            lock = self._trying = make_lock()
            if not blocking:
                got = lock.acquire(blocking=False)
            else:
                left = None if deadline is None else max(0.0, deadline - self.monotonic())
                got = lock.acquire(blocking=True, timeout=left)
        except BaseException:
            self._trying = None
            self._next_leads()
            raise
        self._trying = None
        why = None if got else silent_servers(lock)
        # a leader with no time left may have asked no one: its "no" says nothing
        if got or why is not None or left is None or left >= NO_TIME_S:
            self._silent, self._silent_at = why, self.monotonic()
        if not got:
            self._next_leads()
            return None
        with self._mutex:
            self._bound.start()
            self.acquisitions += 1
        return lock

    def silent_servers_since(self, since: float) -> str | None:
        """Why this cohort could not get the lock, if its servers were the cause: as the
        leader's try sees it now, or as a failed try found it after ``since``. A buyer
        queued here times out without a try of its own; a leader's try that finds the
        servers back clears it."""
        trying = self._trying
        why = None if trying is None else silent_servers(trying)
        if why is None and self._silent_at >= since:
            why = self._silent
        return why

    def release(self, lock: Any) -> None:
        """End a section: pass ``lock`` to the next local buyer, or release it."""
        with self._mutex:
            if self._queue and self._bound.take_pass(lock):
                turn = self._queue.popleft()
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
            if self._queue or not self._bound.take_pass(lock):
                return False
            self.passes += 1
            return True

    def _next_leads(self) -> None:
        with self._mutex:
            if self._queue:
                self._queue.popleft().event.set()  # lock None: acquire it yourself
            else:
                self._busy = False
