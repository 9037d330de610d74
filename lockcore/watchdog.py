"""A renewal thread (看门狗, "watchdog") that keeps a held lock alive during long work.

Seed 004 leaves an open question: what if the business outlives the TTL? Renewal
answers half of it. Every ``interval`` (ttl/3 by default) the watchdog calls
``lock.extend()``. It holds only a *weak* reference to the lock, so a forgotten handle
is collected and its renewals stop instead of keeping a lock alive forever
(python-redis-lock's ``_lock_renewer``).

Failure timeline, and what the holder is told::

    t=0      acquire (ttl 3 s), watchdog starts, renews at 1 s, 2 s, ...
    t=4.0    Redis becomes unreachable; renewal fails -> warning, keep trying
    t=6.0    last successful renewal (counted from when it was sent) + ttl has passed:
             the lock may have expired, and a rival may hold it. lock.lost becomes
             True, on_lost(lock, reason) is called, held() is False, and leaving
             ``with`` raises LockLost.

The deadline is kept by a second thread, not by the renewal's own failure: a renewal
cut off from Redis does not fail at once, it hangs until the client's
``socket_timeout`` (5 s by redis-py's default). Checked only when ``extend()`` raised,
the loss was reported that much later: with the default ttl and client, 6.7 s after a
rival had taken the lock (a lockcore audit).

Renewal cannot help a holder that is paused (GC, SIGSTOP, swap): the watchdog thread is
paused with it. That is why fencing tokens are still needed (see ``fencing.py``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from .errors import LockNotOwned

if TYPE_CHECKING:
    from .base import DistributedLock

logger = logging.getLogger(__name__)


class Watchdog:
    """Renew ``lock`` every ``interval`` seconds until stopped or the lock is lost."""

    def __init__(self, lock: DistributedLock, interval: float,
                 since: float | None = None) -> None:
        """``since``: when the acquire that took the lock was sent (the lock's clock);
        its ttl runs from no earlier. None: now."""
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self.renewals = 0
        self._lock_ref = weakref.ref(lock)
        self._clock = lock.clock
        self._ttl = (lock.ttl_ms or 0) / 1000
        #: when the lock may have expired: the last renewal's (or the acquire's) send
        #: time + ttl
        self._deadline = (self._clock.monotonic() if since is None else since) + self._ttl
        #: a renewal is on its way, or the last one failed: only then may the deadline
        #: thread call the lock lost. A renewal that succeeded is never overruled (a
        #: test's clock may jump past the deadline between two good renewals)
        self._unsure = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lockcore-watchdog:{lock.name}", daemon=True
        )
        self._expiry = threading.Thread(
            target=self._watch_deadline, name=f"lockcore-watchdog-deadline:{lock.name}",
            daemon=True)
        self._thread.start()
        self._expiry.start()

    def stop(self) -> None:
        """Stop renewing; returns once no renewal is in flight."""
        self._stop.set()
        for thread in (self._thread, self._expiry):
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _first_wait(self) -> float:
        """How long before the first renewal: an interval, unless the acquire's ttl
        started earlier than that allows (its send time is the deadline's start), then
        sooner, at once if the deadline has passed: a renewal that succeeds proves the
        key was ours all along.

        **Failure timeline** (a lockcore audit: ``token`` with ``wait="notify"``, ttl
        600 ms, 3 of 3)::

            B:     sends BLPOP + claim (``_tried_at``), blocks up to 1 s
            A:     releases 700 ms later; B's claim runs: B holds, ttl 600 ms
            B:     the watchdog's deadline (send time + ttl) passed 100 ms ago; its first
                   renewal, one interval on, is out when the deadline thread looks: lost
            B:     renewals stop, the key expires mid-section, a rival takes it
            fixed: the first renewal goes at once; the deadline thread's first look is
                   half an interval later, by when it has succeeded"""
        left = self._deadline - self._clock.monotonic()
        return max(0.0, min(self.interval, left - self.interval))

    def _run(self) -> None:
        clock = self._clock
        wait = self._first_wait()
        while not self._stop.wait(wait):
            wait = self.interval
            lock = self._lock_ref()
            if lock is None or lock.token is None or lock.lost:
                return
            sent = clock.monotonic()  # the renewed ttl runs from no earlier than this
            self._unsure = True
            try:
                lock.extend()
            except LockNotOwned:
                return  # extend() has already marked the lock lost
            except Exception as exc:  # connection refused, timeout, ...
                if self._stop.is_set():
                    return
                logger.warning("renewal of %r failed: %s", lock.name, exc)
                if clock.monotonic() >= self._deadline:
                    lock._mark_lost(f"renewal could not reach the backend for a whole ttl ({exc})")
                    return
            else:
                self.renewals += 1
                self._deadline = sent + self._ttl
                self._unsure = False
                logger.debug("renewed %r (%d)", lock.name, self.renewals)
            finally:
                del lock

    def _watch_deadline(self) -> None:
        """Report the lock lost once a whole ttl has passed since the last renewal was
        sent, even while a renewal hangs on a backend that does not answer."""
        clock = self._clock
        # Half an interval out of step with the renewals: both threads waited one
        # interval, so with a test's clock past the deadline a look could meet the
        # renewal just sent (unsure) and call a lock lost whose renewals all succeeded
        # (a full suite in three processes). A real clock's deadline is a ttl away.
        if self._stop.wait(self.interval / 2):
            return
        while True:
            left = self._deadline - clock.monotonic()
            if left <= 0 and self._unsure:
                lock = self._lock_ref()
                if lock is not None and lock.token is not None and not self._stop.is_set():
                    lock._mark_lost("no renewal reached the backend for a whole ttl")
                return
            # at most one interval: the lock's clock may be another than time's (a test's);
            # past the deadline with no renewal out, the next renewal's outcome decides
            if self._stop.wait(min(left, self.interval) if left > 0 else self.interval / 4):
                return
            lock = self._lock_ref()
            if lock is None or lock.token is None or lock.lost:
                return
            del lock
