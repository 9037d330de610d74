"""token: ``SET key <random> NX PX ttl`` and a compare-and-delete release. Safe on one Redis.

**Guarantee.** While one Redis primary stays up, at most one handle holds the lock at a
time, a crashed holder's lock frees itself after ``ttl_ms``, and nobody but the holder
can release or extend it. Each acquisition gets a fencing token strictly greater than
every earlier one for the same resource.

**Algorithm** (seeds 000 and 002).

1. Acquire: one Lua script (``token_acquire.lua``) does ``SET lock:{r} <token> NX PX ttl``
   and, only if that succeeded, ``INCR lock:{r}:fence``. One round trip; the fencing
   counter lives in a key that release never deletes, so it never goes backwards.
2. Release: ``token_release.lua`` deletes the key only if it still holds our token, and
   pushes one wake-up for a notify-waiter. One round trip.
3. The token is fresh per acquisition and stored on the handle (not a thread-local), so
   greenlets and asyncio tasks sharing a thread cannot release each other's locks.

**Hand-off under contention** (``wait="notify"``; the lock itself is unchanged).

4. A waiter sends its BLPOP and its next attempt in one pipeline. Redis runs the
   attempt the moment the wake-up lands, so the woken waiter holds the lock before the
   releaser, a round trip away, can barge back in: the lock goes round the BLPOP queue
   in arrival order, and no process is woken only to lose the race.
5. The wake-up carries the releaser's handle id. A release that finds the previous
   wake-up taken (by anyone but ourselves) knows others are queued, so this handle's
   next blocking ``acquire`` skips the try that would fail and queues at once: one
   round trip per acquisition. A lone handle pops its own wake-up and stays on 1.

**Failure timeline** this fixes (seed 002, ``setnx``'s plain DEL)::

    A: SET NX PX 100 -> ok, token a1;   A pauses 150 ms (GC)
    -- lock expires at 100 ms --
    B: SET NX PX 100 -> ok, token b1
    A: resumes, DEL                      <- with setnx this frees *B's* lock
    A: token_release(a1) -> 0            <- here: refused, LockNotOwned raised

**What it does not fix.** A holder paused past its TTL still *believes* it holds the
lock until it next talks to Redis: its writes must carry ``fencing_token`` and the store
must reject stale ones (``fencing.py``). A primary that fails over before replicating the
key can grant it twice (seed 004; see ``redlock``).

**When to use it.** The default for one Redis: short critical sections, ttl well above
the worst section time, a watchdog (``watchdog=True``) for sections of unknown length.
"""

from __future__ import annotations

from typing import Any

from .. import scripts
from ..base import DistributedLock, new_token
from ..errors import LockNotOwned
from ..waiting import SIGNAL_TTL_MS, wake_and_try

#: token_release.lua: released, and someone took the previous wake-up (others wait)
WOKE_A_WAITER = 2
#: how long after such a release the next acquire still queues first. The newest
#: wake-up outlives it (SIGNAL_TTL_MS), so a free lock always has one waiting for us.
QUEUE_FIRST_S = 10.0


class TokenLock(DistributedLock):
    strategy = "token"
    safe = True
    origin = "seeds 000, 002"
    summary = "SET NX PX with a random token, Lua compare-and-delete release, fencing tokens"
    signals_on_release = True

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        if self.ttl_ms is None:
            raise ValueError("the token lock needs a ttl_ms: it is what frees a crashed holder")
        self.fence_key = f"{self.key}:fence"
        self._handle = new_token()  # the value of our wake-ups, to recognise our own
        self._woke_myself = False
        self._released_at = 0.0
        self._acquire_script = scripts.script(client, "token_acquire")
        self._release_script = scripts.script(client, "token_release")
        self._extend_script = scripts.script(client, "token_extend")

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """As ``DistributedLock.acquire``; a queue-first hint too old to trust is dropped."""
        if self.queue_first and self.clock.monotonic() - self._released_at > QUEUE_FIRST_S:
            self.queue_first = False
        return super().acquire(blocking, timeout)

    def _try_acquire(self, token: str) -> bool:
        self._woke_myself = False
        return self._took(self._acquire_script(keys=[self.key, self.fence_key],
                                               args=[token, self.ttl_ms]))

    def _block_then_try(self, block_s: float) -> tuple[str, bool]:
        token = new_token()
        wake, reply = wake_and_try(self, self._acquire_script, [self.key, self.fence_key],
                                   [token, self.ttl_ms], block_s)
        # Our own release's wake-up, still there: nobody was waiting for it.
        self._woke_myself = wake is not None and wake[1] in (self._handle, self._handle.encode())
        return token, self._took(reply)

    def _took(self, reply: list[int]) -> bool:
        ok, value = reply
        if ok:
            self.fencing_token = int(value)
            return True
        self.holder_ttl_ms = int(value)
        return False

    def _release(self, token: str) -> None:
        done = self._release_script(keys=[self.key, self.signal_key],
                                    args=[token, SIGNAL_TTL_MS, self._handle])
        if done == scripts.NOT_OWNED:
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        self._released_at = self.clock.monotonic()
        self.queue_first = (done == WOKE_A_WAITER and not self._woke_myself
                            and self.waiter.name == "notify")

    def _extend(self, token: str, ttl_ms: int) -> None:
        if self._extend_script(keys=[self.key], args=[token, ttl_ms]) != scripts.OK:
            raise LockNotOwned("cannot extend: the lock is no longer ours", self.name)
