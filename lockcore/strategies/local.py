"""local: a ``threading.Lock`` per name. Safe in one process, unsafe across workers.

**Guarantee.** Inside one Python process, at most one handle holds a given name at a
time. Nothing at all across processes: every gunicorn worker has its own dict of locks.

**Algorithm** (seed 000, "process lock vs distributed lock"). A process-wide dict maps
each name to one ``threading.Lock`` (while any handle of that name exists); acquiring
is ``Lock.acquire(blocking=False)`` inside the base class's retry loop. The backend is
ignored (pass ``None``), nothing expires, and a crashed holder cannot block anyone,
because it takes the whole process, and so the lock, with it.

**Failure timeline** (the flash sale runs four gunicorn workers)::

    worker 1: local lock "stock:sku-1" -> acquired; reads stock = 1
    worker 2: local lock "stock:sku-1" -> acquired too (its own dict); reads stock = 1
    worker 1: stock = 0, order #1
    worker 2: stock = 0, order #2          <- oversold: one unit, two orders

**When to use it.** Threads of one process sharing a resource of that process. Never
for a resource shared between processes or machines; that is what the rest of
``lockcore`` is for. ``wait="notify"`` waits on the ``threading.Lock`` itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..base import DistributedLock
from ..errors import LockNotOwned


class _Slot:
    """One name's ``threading.Lock`` and the token of its holder, shared by every handle
    of that name in the process, and gone with the last of them: a dict of every name
    ever locked grew for good (100,000 names, 22 MB; a lockcore audit)."""

    __slots__ = ("lock", "owner", "__weakref__")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: str | None = None


#: re-entrant: ``_slot_for`` allocates under it, which may run a cyclic collection, and
#: with it the finalizer of a held handle in a cycle, which takes it too (a review: a
#: plain Lock hung every ``local`` lock of the process)
_guard = threading.RLock()
#: name -> its slot, while a handle of that name exists
_slots: weakref.WeakValueDictionary[str, _Slot] = weakref.WeakValueDictionary()


def _slot_for(name: str) -> _Slot:
    with _guard:
        found = _slots.get(name)
        if found is None:
            found = _slots[name] = _Slot()
        return found


def _let_go(slot: _Slot, token: str) -> bool:
    """Release ``slot``'s lock if ``token`` holds it; whether it did."""
    with _guard:
        if slot.owner != token:
            return False
        slot.owner = None
    slot.lock.release()
    return True


class _LocalNotifyWaiter:
    """Block on the ``threading.Lock`` itself, then let the retry loop take it."""

    name = "notify"

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        # Acquire-then-release wakes us the moment the holder lets go; the next
        # _try_acquire may still lose to another thread, which is only a retry.
        if self._lock.acquire(timeout=-1 if remaining is None else max(remaining, 0)):
            self._lock.release()


class LocalLock(DistributedLock):
    needs_redis = False
    name_is_hash_tag = False
    process_local = True  # a forked child's copy of the lock is its own
    strategy = "local"
    safe = False
    origin = "seed 000"
    summary = "threading.Lock per name: one process only, every gunicorn worker has its own"
    expires = False
    #: its waiters wait on the threading.Lock itself: a release sends nothing to Redis
    #: (the backend is ignored, and may be anything: an audit's string backend made
    #: release raise AttributeError after it had released)
    signals_on_release = True

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        options.setdefault("ttl_ms", None)  # nothing expires; a ttl would be a lie
        super().__init__(client, name, **options)
        self.ttl_ms = None  # even if one was given (a caller passing one to every strategy)
        self._slot = _slot_for(name)
        self._lock = self._slot.lock
        if self.waiter.name == "notify":
            self.waiter = _LocalNotifyWaiter(self._lock)

    def _try_acquire(self, token: str) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        with _guard:
            self._slot.owner = token
        # dropped unreleased, the handle lets go when collected: the lock was held for
        # good by a handle nobody could reach (its waiters waited for ever)
        self._let_go_if_collected(_let_go, self._slot, token)
        return True

    def _release(self, token: str) -> None:
        if not _let_go(self._slot, token):
            raise LockNotOwned("the local lock is not held by this handle", self.name)

    def _is_held(self, token: str) -> bool:
        with _guard:
            return self._slot.owner == token

    def locked(self) -> bool:
        return self._lock.locked()
