"""naive: DELIBERATELY UNSAFE. ``GET``, check, ``SET``: check-then-act without atomicity.

**Guarantee.** None under concurrency. It works when the clients happen to take turns,
which is exactly why it survives code review and fails in the flash sale.

**Algorithm** (the first thing everyone writes; seed 002's problem statement).

1. ``GET lock:{r}``; if it holds a value, someone has the lock: return False.
2. Otherwise ``SET lock:{r} <token> PX ttl`` and believe we hold it.
3. Release: ``GET``, compare with our token, ``DEL`` (again two round trips).

Steps 1 and 2 are two round trips. Nothing stops another client from running its own
step 1 in between, so both see "free" and both SET. The TTL is there so that this
strategy shows only one flaw (no atomicity), not also the crash flaw of ``setnx``
(so it needs a ``ttl_ms``).

**Failure timeline**::

    A: GET lock:{sku} -> nil      "free"
    B: GET lock:{sku} -> nil      "free"
    A: SET lock:{sku} a1          A believes it holds the lock
    B: SET lock:{sku} b1          B believes it holds the lock too (and overwrote A's)
    A, B: read stock 1, write stock 0, two orders for one unit

The window is tiny on an idle machine; 1000 buyers hit it every second. Tests force it
deterministically with ``between_check_and_set``, a hook called after a GET found the
lock free and before the SET.

**When to use it.** Never; it is here to be beaten. Use ``token``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..base import DistributedLock
from ..errors import LockNotOwned

Hook = Callable[[], None]


class NaiveLock(DistributedLock):
    strategy = "naive"
    safe = False
    origin = "seed 002"
    summary = "GET, check, SET: two round trips, so two clients can both see 'free'"

    def __init__(self, client: Any, name: str, *, between_check_and_set: Hook | None = None,
                 **options: Any) -> None:
        """:param between_check_and_set: called after GET found the lock free, before the
            SET; tests use it to let a rival in at the worst moment."""
        super().__init__(client, name, **options)
        if self.ttl_ms is None:  # it kept setnx's crash flaw too, against the lesson above
            raise ValueError("naive needs a ttl_ms: it shows the GET-then-SET race alone "
                             "(a lock that never expires is setnx's lesson)")
        if between_check_and_set is not None and not callable(between_check_and_set):
            raise TypeError("between_check_and_set must be callable")
        self.between_check_and_set = between_check_and_set

    def _try_acquire(self, token: str) -> bool:
        if self.client.get(self.key) is not None:
            return False
        if self.between_check_and_set is not None:
            self.between_check_and_set()
        # The bug this module exists for: the key may have been set since our GET.
        self.client.set(self.key, token, px=self.ttl_ms)
        return True

    def _release(self, token: str) -> None:
        if not self._is_held(token):
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        self.client.delete(self.key)  # another client may have taken it since the GET

    def _extend(self, token: str, ttl_ms: int) -> None:
        if not self._is_held(token):
            raise LockNotOwned("cannot extend: the lock is no longer ours", self.name)
        self.client.pexpire(self.key, ttl_ms)
