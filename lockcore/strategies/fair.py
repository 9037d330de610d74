"""fair: a first-come, first-served Redis lock that hands itself to the next waiter. Safe.

**Guarantee.** Everything ``token`` guarantees on one Redis (one holder, TTL frees a
crashed holder, owner-only release, growing fencing tokens), plus *order*: the lock is
granted in the order acquisitions arrived, and a release wakes only the next waiter.
With a plain token lock the fastest poller wins; under load some workers starve.

**Algorithm** (seed 001's ZooKeeper sequence numbers, done on Redis; ``fair.lua``).

1. An acquisition gets a uuid that stays the same across its attempts. Its first call
   takes a ticket (``INCR :seq``) and joins ``:queue``, a ZSET ordered by ticket.
   A retry after a lost reply finds the uuid already queued and keeps the old ticket:
   seed 001's *ghost node* (a second entry nobody would ever remove) cannot happen.
2. Every call renews the waiter's lease in ``:leases`` (a ZSET of expiry times). A
   waiter that died or gave up stops renewing and is skipped once its lease runs out.
3. Release does not just delete: it *hands* the lock to the oldest live waiter (sets
   the holder key to its uuid, bumps the fence) and pushes one element onto that
   waiter's own list ``lock:{name}:wake:<uuid>``. Nobody else wakes up.
4. The new holder has only a claim window (its lease) to take it up; its next call
   finds the key holding its uuid and stretches it to the full ``ttl_ms``.

**Failure timeline** (a waiter dies in the queue)::

    A holds; B queues (lease 3 s); C queues behind B
    B: crashes
    A: releases at t=1 s -> hands the lock to B (claim window 3 s), wakes B's list
    t=4 s: the claim window runs out; C's next call finds the lock free -> granted

Bounded, not instant: a dead waiter costs at most one lease. Keep ``lease_ms`` above
the longest wait between two calls (it defaults to 3x the poll/backoff ceiling, >= 3 s).

**wait.** ``notify``: each waiter BLPOPs its own wake list with its claim pipelined
behind it, so Redis runs the claim the moment the hand-off wakes it: no round trip
between the hand-off and the new holder's critical section. A release that handed the
lock on makes the handle's next acquire join, block and claim in one pipeline (the
join rings our own list if the lock is free). ``poll``/``backoff``: the same hand-off,
noticed at the next poll. Either way the order is the queue's.

**When to use it.** When starvation matters more than raw throughput: long queues of
buyers for one item, batch jobs that must all get a turn.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import scripts
from ..base import DistributedLock, new_token
from ..errors import LockNotOwned
from ..waiting import wake_and_try

logger = logging.getLogger(__name__)

RELEASED, LEFT_QUEUE, HANDED_ON = 1, 2, 3


class FairLock(DistributedLock):
    strategy = "fair"
    safe = True
    origin = "seed 001"
    summary = "FIFO queue with direct hand-off on Redis: no starvation, wakes one waiter"
    signals_on_release = True

    def __init__(self, client: Any, name: str, *, lease_ms: int | None = None,
                 **options: Any) -> None:
        super().__init__(client, name, **options)
        if self.ttl_ms is None:
            raise ValueError("the fair lock needs a ttl_ms: it is what frees a crashed holder")
        ceiling = max(options.get("poll_ms", 50), options.get("max_poll_ms", 1_000))
        self.lease_ms = lease_ms or max(3_000, int(3 * ceiling))
        self.keys = [self.key, f"{self.key}:queue", f"{self.key}:leases",
                     f"{self.key}:lease_ms", f"{self.key}:seq", f"{self.key}:fence",
                     f"{self.key}:wake:"]
        self.position: int | None = None  # our place in the queue at the last attempt
        self._uuid = new_token()
        self._script = scripts.script(client, "fair")
        self._extend_script = scripts.script(client, "token_extend")

    @property
    def signal_key(self) -> str:
        """Our own wake list: a release pushes onto the next waiter's list only."""
        return f"{self.key}:wake:{self._uuid}"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Queue up and wait for our turn; leave the queue if we give up."""
        if self._token is not None:
            return super().acquire(blocking, timeout)  # raises: locks are not reentrant
        self._uuid = new_token()  # one identity for every attempt of this acquisition
        self.position = None  # not queued yet
        try:
            gotten = super().acquire(blocking, timeout)
        except BaseException:
            self._leave_queue()
            raise
        if not gotten:
            self._leave_queue()
        return gotten

    def _try_acquire(self, token: str) -> bool:
        # ``token`` is fresh per attempt; the queue needs the acquisition's stable uuid.
        return self._took(self._script(keys=self.keys, args=self._acquire_args()))

    def _block_then_try(self, block_s: float) -> tuple[str, bool]:
        # The claim rides behind the BLPOP: Redis runs it as the hand-off wakes us. Not
        # queued yet (queue_first): join in the same round trip, ringing our own wake
        # list if the lock was free, so the BLPOP behind does not wait.
        first = self._acquire_args("1") if self.position is None else None
        _, reply = wake_and_try(self, self._script, self.keys, self._acquire_args(), block_s,
                                first_args=first)
        return self._uuid, self._took(reply)

    def _acquire_args(self, ring: str = "0") -> list[Any]:
        return ["acquire", self._uuid, self.ttl_ms, self.lease_ms, ring]

    def _took(self, reply: list[int]) -> bool:
        if reply[0] == 1:
            self.fencing_token = int(reply[1])
            self.position = None
            return True
        self.holder_ttl_ms = int(reply[1])
        self.position = int(reply[2]) if len(reply) > 2 else None
        return False

    def _on_acquired(self, token: str) -> None:
        super()._on_acquired(self._uuid)  # the value in Redis is the uuid

    def _release(self, token: str) -> None:
        done = self._script(keys=self.keys, args=["release", token, self.ttl_ms, self.lease_ms])
        if done not in (RELEASED, HANDED_ON):
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        # Someone was queued, so others may be: a try now would only join the queue.
        self.queue_first = done == HANDED_ON and self.waiter.name == "notify"

    def _extend(self, token: str, ttl_ms: int) -> None:
        if self._extend_script(keys=[self.key], args=[token, ttl_ms]) != scripts.OK:
            raise LockNotOwned("cannot extend: the lock is no longer ours", self.name)

    def _leave_queue(self) -> None:
        """Giving up: leave the queue, or pass the lock on if it was handed to us meanwhile."""
        try:
            self._script(keys=self.keys, args=["release", self._uuid, self.ttl_ms,
                                               self.lease_ms])
        except Exception as exc:  # our lease will expire anyway
            logger.warning("fair lock %r: could not leave the queue: %s", self.name, exc)
