"""A start line for Locust users, so a thousand buyers arrive at once rather than in a ramp.

Locust starts users at ``--spawn-rate`` per second and warns above 100/s, so spawning
alone gives a ramp: the first buyers are served before the last ones exist, and locks
never see real contention. Holding every user at a barrier and releasing them together
makes the spike independent of the spawn rate.

Two ways to open the gate:

* when Locust reports that spawning completed (``events.spawning_complete``), which is
  exact for one process and per-worker in distributed mode;
* at a wall-clock instant (``start_at``, epoch seconds) given to every process, which
  lines up distributed workers too.

The barrier waits at most ``timeout`` seconds, so a lost event degrades to a ramp
instead of a hang. It only works in a gevent-patched process (Locust's).
"""

from __future__ import annotations

import logging
import time

from gevent.event import Event

logger = logging.getLogger(__name__)


class SpikeBarrier:
    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._open = Event()
        self._armed = False
        self._start_at: float | None = None
        #: False for ``run_single_user()``: one debugged user has nobody to wait for
        self.enabled = True

    def arm(self, start_at: float | None = None) -> None:
        """Close the gate for a new test; it opens at ``start_at`` or on :meth:`release`."""
        self._open.clear()
        self._armed = self.enabled
        self._start_at = start_at

    def release(self) -> None:
        if self._armed and not self._open.is_set():
            logger.info("spawning complete: releasing every buyer at once")
        self._open.set()

    def wait(self) -> None:
        """Block this user (greenlet) until the gate opens; no-op when never armed."""
        if not self._armed:
            return
        if self._start_at is not None:
            delay = self._start_at - time.time()
            if delay > self.timeout:
                logger.warning("start instant is %.0fs away; waiting only %.0fs",
                               delay, self.timeout)
            time.sleep(min(max(delay, 0.0), self.timeout))
            return
        if not self._open.wait(self.timeout):
            logger.warning("spawning did not complete within %.0fs; starting anyway",
                           self.timeout)
