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

The queue machinery, shared with ``token``'s starvation mode, is ``handoff.py``.

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
noticed at the next poll. Either way the order is the queue's; but with ``poll`` a
lock handed on lies idle until its new holder's next poll, and with ``backoff`` up to
``max_poll_ms`` (1 s): under contention that is most of each turn (an audit: 8 threads
took 3 acquisitions/s with ``backoff``). Contended, use ``notify``.

**When to use it.** When starvation matters more than raw throughput: long queues of
buyers for one item, batch jobs that must all get a turn.
"""

from __future__ import annotations

import math
from typing import Any

from ..base import MAX_TTL_MS
from ..waiting import positive_ms
from .handoff import HandOffLock


class FairLock(HandOffLock):
    strategy = "fair"
    safe = True
    origin = "seed 001"
    summary = "FIFO queue with direct hand-off on Redis: no starvation, wakes one waiter"

    def __init__(self, client: Any, name: str, *, lease_ms: int | None = None,
                 **options: Any) -> None:
        ceiling = max(positive_ms("poll_ms", options.get("poll_ms", 50)),
                      positive_ms("max_poll_ms", options.get("max_poll_ms", 1_000)))
        if lease_ms is None:  # a waiter calls at least every max_poll_ms
            lease_ms = min(max(3_000, math.ceil(3 * ceiling)), MAX_TTL_MS)
        super().__init__(client, name, lease_ms=lease_ms, **options)
        self.keys = self.queue_keys
        self.position: int | None = None  # our place in the queue at the last attempt
        self._script = self._queue_script

    def _new_acquisition(self) -> None:
        super()._new_acquisition()
        self.position = None  # not queued yet

    def _try_acquire(self, token: str) -> bool:
        # ``token`` is fresh per attempt; the queue needs the acquisition's stable uuid.
        return self._took(self._queue_try())

    def _block_then_try(self, block_s: float) -> tuple[str, bool]:
        # Not queued yet (queue_first): join in the same round trip as the BLPOP.
        reply = self.join_block_claim(block_s, join=self.position is None)
        return self._uuid, self._took(reply)

    def _took(self, reply: list[int]) -> bool:
        if reply[0] == 1:
            self.fencing_token = int(reply[1])
            self.position = None
            return True
        self.holder_ttl_ms = int(reply[1])
        # no place: our own lease ran out within the call (a lease_ms of a millisecond
        # or two, shorter than the script's run): dropped as a dead waiter, we join
        # again at the next call (an audit: a TypeError out of acquire at lease_ms=1)
        self.position = int(reply[2]) if len(reply) > 2 and reply[2] is not None else None
        return False
