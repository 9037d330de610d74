"""The bound on a cohort's hold: when a held lock must be released instead of passed on.

A cohort (``cohort.py``) passes its distributed lock between the buyers of one worker
without releasing it. Every pass is a section the other processes cannot run, so the
passes of one hold are bounded, and so is its age.

**Failure timeline** the bound prevents::

    worker 1: acquires; passes 1, 2, 3, ... to its own buyers, never releasing
    worker 2: its buyers wait, time out: 503 busy for half the shop   <- unbounded
    bounded:  after max_passes or max_hold_s worker 1 releases; worker 2's head,
              blocked in BLPOP, is woken and its cohort runs next

**The rules.** One more pass (or one more combined batch, ``Cohort.keep``) needs all of::

    passes:   fewer than ``max_passes`` since the acquisition
    lost:     the lock is not flagged lost (a watchdog found it gone)
    young:    held for less than ``max_hold_s`` and less than a quarter of its TTL,
              so a passed section starts with most of the TTL left, like a fresh
              acquisition
    validity: a RedLock's remaining validity (its own clock) is over twice that hold

The age is measured from the acquisition, not from the last pass: passing does not
renew anything in Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HoldBound:
    """The passes and age of one hold. Not locked: the cohort calls it under its mutex."""

    def __init__(self, max_passes: int, max_hold_s: float,
                 monotonic: Callable[[], float]) -> None:
        self.max_passes = max_passes
        self.max_hold_s = max_hold_s
        self.monotonic = monotonic
        self._acquired_at = 0.0
        self._passes = 0

    def start(self) -> None:
        """A fresh acquisition: its age and its passes start from zero."""
        self._acquired_at, self._passes = self.monotonic(), 0

    def take_pass(self, lock: Any) -> bool:
        """Count one more pass of ``lock`` if the bound allows it; whether it does."""
        if not self._allows_pass(lock):
            return False
        self._passes += 1
        return True

    def _allows_pass(self, lock: Any) -> bool:
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
