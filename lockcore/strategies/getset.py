"""getset: seed 003's ``SETNX lock <expiry>`` + ``GETSET`` takeover. Unsafe: it trusts clocks.

**Guarantee.** Mutual exclusion only if every client's wall clock agrees (to well
under the TTL) and no holder outlives its TTL. The lock's value is a wall-clock expiry
time that *each client* compares with *its own* clock.

**Algorithm** (seed 003, the pre-2.6.12 Redis recipe).

1. ``SETNX lock:{r} <now + ttl + 1>`` (milliseconds); 1 means we hold it.
2. Otherwise ``GET`` it. If that timestamp is still in the future, the lock is held.
3. If it is in the past, the holder is presumed dead: ``GETSET lock:{r} <now + ttl + 1>``.
   If the *old* value GETSET returns is still not in the future, nobody beat us: we hold it.
   (A plain DEL + SETNX here would let two clients both take it; GETSET fixes that.)
4. Release: only if our own expiry and the stored one are still in the future, ``DEL``.

**Failure timelines**::

    clock skew:  A (correct clock) holds the lock until 12:00:10.
                 B's clock runs 60 s ahead: to B it is 12:01:05, so A "expired".
                 B: GETSET -> A's 12:00:10, "in the past" -> B holds it too.

    overwritten expiry:  A's lock has expired. B and C both GET it and see it expired.
                 C: GETSET c_expiry -> old value expired -> C holds it
                 B: GETSET b_expiry -> c_expiry, not expired -> B backs off, but the
                    key now holds *B's* timestamp: C's own check ("is the stored
                    expiry mine?") fails and the lock's lifetime follows B's clock.

The seed calls the second one negligible; with skewed clocks it is not. Tests inject a
skewed clock through ``clock_skew_s`` (or any ``clock``) and force the second
interleaving with ``between_get_and_getset``.

**locked()** reads the timestamp too: the key has no Redis TTL (its expiry is the
value), so ``EXISTS``, the base class's answer, said "locked" for a holder that crashed
long ago, while the next ``acquire`` took the lock over at once (a lockcore audit).

**When to use it.** Never with Redis >= 2.6.12: ``SET NX PX`` (``token``) needs no clock
at all, because Redis itself expires the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..base import DistributedLock
from ..errors import LockNotOwned


class GetsetLock(DistributedLock):
    strategy = "getset"
    safe = False
    origin = "seed 003"
    summary = "SETNX <expiry timestamp> + GETSET takeover: depends on every client's clock"

    def __init__(self, client: Any, name: str, *, clock_skew_s: float = 0.0,
                 between_get_and_getset: Callable[[], None] | None = None,
                 **options: Any) -> None:
        """:param clock_skew_s: added to this client's wall clock (a clock running ahead).
        :param between_get_and_getset: called after GET found an expired timestamp and
            before GETSET; tests let a rival in there."""
        super().__init__(client, name, **options)
        if self.ttl_ms is None:
            raise ValueError("getset needs a ttl_ms: the stored timestamp is now + ttl")
        try:
            self.clock_skew_s = float(clock_skew_s)
        except (TypeError, ValueError):
            raise ValueError(f"clock_skew_s must be a number of seconds, not "
                             f"{clock_skew_s!r}") from None
        if not math.isfinite(self.clock_skew_s):  # nan: every expiry compare was False
            raise ValueError(f"clock_skew_s must be finite, not {clock_skew_s!r}")
        if between_get_and_getset is not None and not callable(between_get_and_getset):
            raise TypeError("between_get_and_getset must be callable")
        self.between_get_and_getset = between_get_and_getset
        #: the expiry timestamp (ms) we wrote when we took the lock
        self.expiry_ms: int | None = None

    def now_ms(self) -> int:
        """This client's idea of the wall-clock time, in milliseconds."""
        return int((self.clock.time() + self.clock_skew_s) * 1000)

    def _try_acquire(self, token: str) -> bool:
        now = self.now_ms()
        expiry = now + self.ttl_ms + 1  # type: ignore[operator]
        if self.client.setnx(self.key, expiry):
            self.expiry_ms = expiry
            return True
        current = _as_int(self.client.get(self.key))
        if current is not None and current > now:
            self.holder_ttl_ms = current - now  # by our clock, for a notify-waiter
            return False
        if self.between_get_and_getset is not None:
            self.between_get_and_getset()
        old = _as_int(self.client.getset(self.key, expiry))
        if old is None or old <= now:  # passed as GET reads it (or deleted): nobody beat us
            self.expiry_ms = expiry
            return True
        # Someone beat us, and our GETSET has just overwritten their expiry with ours.
        self.holder_ttl_ms = max(old - now, 1)
        return False

    def _release(self, token: str) -> None:
        now = self.now_ms()
        stored = _as_int(self.client.get(self.key))
        if self.expiry_ms is None or now >= self.expiry_ms or stored is None or now >= stored:
            raise LockNotOwned("our timestamp has passed: someone else may hold it now",
                               self.name)
        self.client.delete(self.key)

    def _extend(self, token: str, ttl_ms: int) -> None:
        if not self._is_held(token):
            raise LockNotOwned("cannot extend: the stored timestamp is not ours", self.name)
        expiry = self.now_ms() + ttl_ms + 1
        self.client.set(self.key, expiry)  # GET then SET: racy, like the rest of it
        self.expiry_ms = expiry

    def locked(self) -> bool:
        """Whether the stored timestamp is still in the future by this client's clock,
        the comparison ``acquire`` makes before taking a lock over."""
        stored = _as_int(self.client.get(self.key))
        return stored is not None and stored > self.now_ms()

    def _is_held(self, token: str) -> bool:
        stored = _as_int(self.client.get(self.key))
        return stored is not None and stored == self.expiry_ms and self.now_ms() < stored


def _as_int(value: Any) -> int | None:
    return None if value is None else int(value)
