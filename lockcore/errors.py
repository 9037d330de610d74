"""The exception tree of lockcore.

::

    LockError(message, lock_name)
     +-- LockTimeout            acquire() inside ``with`` gave up at its deadline
     +-- LockNotOwned           release()/extend() by a handle that no longer holds the lock
     |    +-- LockLost          the lock expired or was taken while we believed we held it
     +-- FencingTokenRejected   a storage layer refused a write carrying a stale token

Contention is not an error: ``acquire()`` returns False, as in redis-py and
python-redis-lock. A bad argument raises ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations


class LockError(Exception):
    """Base class of every lock failure; carries the lock's resource name."""

    def __init__(self, message: str, lock_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.lock_name = lock_name

    def __str__(self) -> str:
        if self.lock_name is None:
            return self.message
        return f"{self.message} (lock {self.lock_name!r})"


class LockTimeout(LockError):
    """The lock was not acquired before the deadline."""


class LockNotOwned(LockError):
    """This handle does not hold the lock (never acquired, released, or expired)."""


class LockLost(LockNotOwned):
    """The lock was held and then lost: its TTL ran out, renewal failed, or a session died."""


class FencingTokenRejected(LockError):
    """A write carried a fencing token older than one the storage has already seen."""

    def __init__(self, message: str, lock_name: str | None = None, *,
                 token: int | None = None, highest_seen: int | None = None) -> None:
        super().__init__(message, lock_name)
        self.token = token
        self.highest_seen = highest_seen
