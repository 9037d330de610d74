"""setnx-expire: ``SETNX`` then a separate ``EXPIRE``. Unsafe: a crash between them is forever.

**Guarantee.** Like ``setnx``, plus a TTL *if both commands arrive*. They are two round
trips, not one atomic command.

**Algorithm** (seed 003's Java handler: ``jedis.setnx(key, key)`` then
``jedis.expire(key, 3)``, retrying every 300 ms).

1. ``SETNX lock:{r} <token>``; 0 means someone holds it.
2. ``PEXPIRE lock:{r} ttl``, a second command.
3. Release: plain ``DEL``, as in the seed (so, like ``setnx``, a holder that outlived
   its TTL deletes the next holder's lock).

**Failure timeline**::

    A: SETNX lock:{sku} a1 -> 1
    A: is SIGKILLed (or its connection drops) before PEXPIRE
    -- the key exists with no TTL: PTTL lock:{sku} == -1 --
    B, C, ...: SETNX -> 0 forever

Options to show it: ``crash_between`` is a hook called between the two commands (a
test raises or kills the process there); ``gap_s`` sleeps between them, so a test can
SIGKILL a holder subprocess inside the window.

**When to use it.** Never: ``SET key value NX PX ttl`` (the ``token`` strategy) does
both steps in one atomic command, and has since Redis 2.6.12.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..base import DistributedLock
from ..errors import LockNotOwned


class SetnxExpireLock(DistributedLock):
    strategy = "setnx-expire"
    safe = False
    origin = "seed 003"
    summary = "SETNX then EXPIRE in two round trips: a crash between them leaves it forever"

    def __init__(self, client: Any, name: str, *,
                 crash_between: Callable[[], None] | None = None, gap_s: float = 0.0,
                 **options: Any) -> None:
        """:param crash_between: called after SETNX succeeded and before EXPIRE.
        :param gap_s: seconds to sleep between SETNX and EXPIRE (a window to kill in)."""
        super().__init__(client, name, **options)
        if self.ttl_ms is None:
            raise ValueError("setnx-expire needs a ttl_ms: the EXPIRE is its whole point")
        if crash_between is not None and not callable(crash_between):
            raise TypeError("crash_between must be callable")
        if isinstance(gap_s, bool) or not isinstance(gap_s, (int, float)) \
                or not math.isfinite(gap_s) or gap_s < 0:  # nan: sleep() raised after SETNX
            raise ValueError(f"gap_s must be a finite number of seconds >= 0, not {gap_s!r}")
        self.crash_between = crash_between
        self.gap_s = gap_s

    def _try_acquire(self, token: str) -> bool:
        if not self.client.setnx(self.key, token):
            self.holder_ttl_ms = self.client.pttl(self.key)  # lets a notify-waiter time out
            return False
        if self.crash_between is not None:
            self.crash_between()
        if self.gap_s:
            self.clock.sleep(self.gap_s)
        self.client.pexpire(self.key, self.ttl_ms)
        return True

    def _release(self, token: str) -> None:
        self.client.delete(self.key)  # as in the seed: no ownership check

    def _extend(self, token: str, ttl_ms: int) -> None:
        if not self._is_held(token):
            raise LockNotOwned("cannot extend: the lock is no longer ours", self.name)
        self.client.pexpire(self.key, ttl_ms)
