"""token: ``SET key <random> NX PX ttl``, compare-and-delete, bounded barging. Safe on one Redis.

**Guarantee.** While one Redis primary stays up, at most one handle holds the lock at a
time, a crashed holder's lock frees itself after ``ttl_ms``, nobody but the holder can
release or extend it, and fencing tokens strictly increase. With ``wait="notify"`` no
waiter waits much longer than ``handoff_after_ms`` plus the holds of those queued ahead.

**Algorithm** (seeds 000 and 002). Acquire: ``token_acquire.lua`` does ``SET NX PX`` and,
only if that worked, ``INCR :fence`` (one round trip; release never deletes the fence).
The token is fresh per acquisition and lives on the handle, not in a thread-local.

**Waiting: Go's ``sync.Mutex`` on Redis** (``wait="notify"``, since Go 1.9). A strict
hand-off puts a process wake-up on the critical path of every acquisition; a lock that
lets a running acquirer *barge* does not (why Java's default ``ReentrantLock`` out-runs
its fair mode). Go bounds the unfairness, and so do we:

1. *Normal mode.* A waiter whose try failed sleeps until ``handoff_after_ms`` after that
   failure; meanwhile a releaser that comes straight back re-takes the lock with one
   ``SET NX``. Release wakes nobody: every normal-mode waiter is awake (on a timer, like
   Go's ``mutexWoken`` spinner) and looks again by itself. The price: a lock released
   for good may sit free until the first waiter's bound (never a lost wake-up).
2. *Starvation mode.* At its bound the waiter joins ``fair``'s FIFO queue (``fair.lua``,
   shared through ``handoff.py``; the join takes the lock if it is free). A release
   with anyone queued *hands* the lock to the oldest live waiter (no ``SET NX`` can
   take it in between) and wakes only it; its claim is pipelined behind its BLPOP.
   Nobody barges until the queue drains. A waiter that cannot block (its pool's
   blocking slots taken, a ``single_connection_client``: ``waiting.py``) joins at its
   bound all the same and finds a hand-off at its next poll, about 20 ms later; it
   kept polling ``SET NX`` while the queue was handed every release, and timed out
   (a lockcore audit).

Every acquisition is still a real ``SET``/release in Redis; what is traded is order, for
at most the bound. ``handoff_after_ms=0`` queues at once: strict FIFO hand-off.

**Failure timeline**::

    A: holds, releases, re-takes (barges) every 0.3 ms;  B: fails at t=0, sleeps
    t=10 ms  B: joins the queue;  A: release -> handed to B; A now waits its turn
    B: crashes while queued -> its lease (3 s) runs out, the next release skips it
    A (holder) paused past its ttl -> the key expires; queued waiters wake at that ttl

A release after the ttl is refused (``LockNotOwned``): it cannot free the next holder's
lock (seed 002). A paused holder must fence its writes (``fencing.py``); a failover
can grant the lock twice (seed 004; see ``redlock``).

**When to use it.** The default for one Redis. Raise ``handoff_after_ms`` for
throughput, lower it (0: FIFO) for tail latency; ``fair`` when order is the point.
"""

from __future__ import annotations

from typing import Any

from .. import scripts
from ..base import MAX_TTL_MS
from .handoff import HandOffLock

#: how long a notify-waiter may be overtaken by bargers before a release hands it the lock
#: (Go's starvation threshold is 1 ms). Every waiter takes one hand-off per bound, and a
#: hand-off costs the lock more than a barge, so a longer bound sells more; but the p99
#: wait is about the bound plus 1 ms, and a FIFO lock's p99 is several of its holds.
#: 5 ms left 8 busy processes in the queue (docs/performance.md, "Session 8"). 15 ms sold
#: 3-21% more than 10 ms, but on a quiet fast machine python-redis-lock's p99 fell to
#: 10.4-16 ms, under 15 ms's 16 ms in half the runs; 10 ms (p99 11 ms) sold 1.53-1.73x
#: its rate there and 1.44-1.52x on a slower machine ("Session 16", "Session 18").
DEFAULT_HANDOFF_AFTER_MS = 10
#: a shorter BLPOP is not worth sending: a waiter with less left just looks
MIN_BLOCK_S = 0.01
#: a queued waiter calls at least every second; skipped once silent this long
QUEUE_LEASE_MS = 3_000
#: how long after a hand-off the next acquire still skips the try that would fail
QUEUE_FIRST_S = 10.0


class TokenLock(HandOffLock):
    strategy = "token"
    safe = True
    origin = "seeds 000, 002"
    summary = "SET NX PX with a random token, Lua compare-and-delete release, fencing tokens"
    fixed_options = frozenset({"lease_ms"})  # the queue lease is QUEUE_LEASE_MS

    def __init__(self, client: Any, name: str, *,
                 handoff_after_ms: float = DEFAULT_HANDOFF_AFTER_MS, **options: Any) -> None:
        if "lease_ms" in options:  # was "got multiple values for keyword argument"
            raise TypeError("token takes no lease_ms: its queue lease is QUEUE_LEASE_MS "
                            "(fair's lease_ms is an option of fair)")
        super().__init__(client, name, lease_ms=QUEUE_LEASE_MS, **options)
        if isinstance(handoff_after_ms, bool) or not isinstance(handoff_after_ms, (int, float)) \
                or not 0 <= handoff_after_ms <= MAX_TTL_MS:  # nan fails both comparisons
            raise ValueError("handoff_after_ms must be a number of milliseconds from 0 to "
                             f"{MAX_TTL_MS} (a year), not {handoff_after_ms!r}")
        self.handoff_after_s = handoff_after_ms / 1000
        self._queued = False  # in starvation mode: our turn comes from the queue
        self._first_fail: float | None = None
        self._released_at = 0.0
        self._acquire_script = scripts.script(client, "token_acquire")

    def _new_acquisition(self) -> None:
        super()._new_acquisition()
        if self.queue_first and self.clock.monotonic() - self._released_at > QUEUE_FIRST_S:
            self.queue_first = False
        self._queued, self._first_fail = False, None

    def _try_acquire(self, token: str) -> bool:
        if not self._queued and self._first_fail is not None and self.waiter.name == "notify" \
                and self.clock.monotonic() - self._first_fail >= self.handoff_after_s:
            self._queued = True  # past the bound, and no block joined (crowded): join now
        if self._queued:  # our turn comes from the queue now, not from SET NX
            return self._took(self._queue_try())
        return self._took(self._acquire_script(keys=[self.key, self.fence_key],
                                               args=[self._uuid, self.ttl_ms]))

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        now = self.clock.monotonic()
        if self._first_fail is None:
            self._first_fail = now
        overtakable = self._first_fail + self.handoff_after_s - now
        if not self._queued and overtakable > 0:  # normal mode: look again at the bound
            self.clock.sleep(min(overtakable, block_s))
            block_s -= overtakable
            if block_s < MIN_BLOCK_S:  # no time left to block: just look
                return self._uuid, self._try_acquire(self._uuid)
        # Starvation mode: join (ringing our own list if the lock is free, which the join
        # takes), block, claim: one round trip, also for the look at the bound.
        join, self._queued = not self._queued, True
        return self._uuid, self._took(self.join_block_claim(block_s, join=join))

    def _took(self, reply: list[int]) -> bool:
        if reply[0] == 1:
            self.fencing_token = int(reply[1])
            return True
        self.holder_ttl_ms = int(reply[1])
        if self._first_fail is None:
            self._first_fail = self.clock.monotonic()
        return False

    def _release(self, token: str) -> None:
        super()._release(token)
        self._released_at = self.clock.monotonic()

    def _leave_queue(self) -> None:
        if self._queued:  # a normal-mode waiter never joined: nothing to leave
            self._queued = False
            super()._leave_queue()
