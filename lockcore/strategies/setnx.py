"""setnx: DELIBERATELY UNSAFE. ``SETNX`` to lock, plain ``DEL`` to unlock, no expiry.

**Guarantee.** Mutual exclusion while every holder behaves: ``SETNX`` is atomic, so two
clients can never both set the key. Nothing else: the lock never expires and anyone
can free it.

**Algorithm** (seed 002's first attempt).

1. ``SETNX lock:{r} <token>``; 1 means we hold it.
2. Release: ``DEL lock:{r}``. It does not check the value, so it frees the lock *whoever*
   holds it. (The base class still raises ``LockNotOwned`` when this handle never
   acquired; the danger is a handle that did acquire and deletes a later holder's key,
   or any other client's stray ``DEL``.)

**Failure timelines** (seed 002's two problems)::

    crash:   A: SETNX -> 1;  A is SIGKILLed (OOM, deploy, kill -9) before DEL
             B, C, ...: SETNX -> 0 forever. The key has no TTL (PTTL -1); the sale is
             stuck until a human deletes it.

    foreign DEL:  A: SETNX -> 1;  an operator or a buggy client runs DEL lock:{r}
                  B: SETNX -> 1   A and B both hold the lock

**When to use it.** Never in production. It is the smallest step up from ``naive`` and
the setting for the two lessons above; ``setnx-expire`` and ``token`` are the fixes.
"""

from __future__ import annotations

from typing import Any

from ..base import DistributedLock


class SetnxLock(DistributedLock):
    strategy = "setnx"
    safe = False
    origin = "seed 002"
    summary = "SETNX + plain DEL: no expiry (a crashed holder blocks forever), anyone can DEL"
    expires = False

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        options.setdefault("ttl_ms", None)  # SETNX has no expiry; that is the lesson
        super().__init__(client, name, **options)
        # a ttl_ms given (a caller that passes one to every strategy) does not apply:
        # reported as given, a crashed holder looked freed after it (an audit)
        self.ttl_ms = None

    def _try_acquire(self, token: str) -> bool:
        return bool(self.client.setnx(self.key, token))

    def _release(self, token: str) -> None:
        # No ownership check, as in the seed: this deletes whoever's lock is there.
        self.client.delete(self.key)
