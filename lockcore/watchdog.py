"""A renewal thread (看门狗, "watchdog") that keeps a held lock alive during long work.

Seed 004 leaves an open question: what if the business outlives the TTL? Renewal
answers half of it. Every ``interval`` (ttl/3 by default) the watchdog calls
``lock.extend()``. It holds only a *weak* reference to the lock, so a forgotten handle
is collected and its renewals stop instead of keeping a lock alive forever
(python-redis-lock's ``_lock_renewer``).

Failure timeline, and what the holder is told::

    t=0      acquire (ttl 3 s), watchdog starts, renews at 1 s, 2 s, ...
    t=4.0    Redis becomes unreachable; renewal fails -> warning, keep trying
    t=6.0    last successful renewal + ttl has passed: the lock has surely expired.
             lock.lost becomes True, on_lost(lock, reason) is called, held() is
             False, and leaving ``with`` raises LockLost.

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

    def __init__(self, lock: DistributedLock, interval: float) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self.renewals = 0
        self._lock_ref = weakref.ref(lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lockcore-watchdog:{lock.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing; returns once no renewal is in flight."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        clock_lock = self._lock_ref()
        if clock_lock is None:
            return
        clock = clock_lock.clock
        ttl = (clock_lock.ttl_ms or 0) / 1000
        last_ok = clock.monotonic()
        del clock_lock
        while not self._stop.wait(self.interval):
            lock = self._lock_ref()
            if lock is None or lock.token is None:
                return
            try:
                lock.extend()
            except LockNotOwned:
                return  # extend() has already marked the lock lost
            except Exception as exc:  # connection refused, timeout, ...
                if self._stop.is_set():
                    return
                logger.warning("renewal of %r failed: %s", lock.name, exc)
                if clock.monotonic() - last_ok >= ttl:
                    lock._mark_lost(f"renewal could not reach the backend for a whole ttl ({exc})")
                    return
            else:
                self.renewals += 1
                last_ok = clock.monotonic()
                logger.debug("renewed %r (%d)", lock.name, self.renewals)
            finally:
                del lock
