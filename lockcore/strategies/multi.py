"""multi: lock many resources at once, all or nothing, in one Lua script. Safe on one Redis.

**Guarantee.** An acquisition holds *every* resource in its list or none of them; two
acquisitions whose lists overlap never hold at the same time; release frees only the
keys that still carry this acquisition's token. Fencing tokens grow with every
acquisition (one counter for all multi locks, so they also order overlapping sets).

**Algorithm** (seed 003's batch lock of many bills, made atomic).

1. ``multi_acquire.lua`` checks that no resource key exists, then ``SET``s them all with
   our token and TTL and ``INCR``s the fence counter. A script runs atomically, so
   nobody can take a key between the check and the writes: no partial hold, ever.
2. ``multi_release.lua`` deletes each key only if it still holds our token, and wakes the
   waiters of exactly the keys it freed.
3. A blocked acquisition learns *which* resource stopped it; with ``wait="notify"`` it
   blocks on that resource's signal list only. Woken by it and stopped by another
   resource then, it passes the wake-up on to that list's next waiter (which slept
   until its block ran out: a lost wake-up).

**Failure timeline** of the seed's version (a pipeline of SETNX, then undo)::

    A: SETNX bill:1 ok, SETNX bill:2 ok, SETNX bill:3 fails -> A must DEL 1 and 2
    A: crashes before the DELs            -> bills 1 and 2 held by nobody, until TTL
    B: wants {1, 2}: refused although nobody is working on them
    C: wants {2, 3}, D wants {1, 3}: partial holds in opposite orders can livelock

With the check-then-set inside one script there is no half-way state to crash in.

**Redis Cluster trade-off.** A script may only touch keys of one hash slot. Two lists
that overlap must contend on the *same* keys, so the slot cannot be derived from each
list: every multi lock uses one global hash tag (``hash_tag``, default ``multi``; keys
``lock:{multi}:r:<resource>``). On a cluster all multi locks live on one shard: correct,
but that shard carries all their load. Shard by business domain with ``hash_tag`` when
you know that two domains never share a resource.

**Key layout.** A resource's key, its wake-up list and the fencing counter each have a
prefix of their own (``lock:{tag}:r:<resource>``, ``lock:{tag}:s:<resource>``,
``lock:{tag}:fence``). With one shared prefix, a resource named ``x:signal`` was the
wake-up list of ``x`` (releasing ``x`` deleted its lock: two holders) and one named
``fence`` was the counter (tokens started again at 1).

**When to use it.** A transfer between accounts, a batch of bills, an order touching
several SKUs: when you would otherwise nest locks and risk deadlock.
"""

from __future__ import annotations

from typing import Any

from .. import scripts
from ..base import DistributedLock, new_token
from ..errors import LockNotOwned
from ..fencing import raise_counter
from ..waiting import SIGNAL_TTL_MS, blpop_timeout
from ..wire import lane


class MultiLock(DistributedLock):
    strategy = "multi"
    safe = True
    origin = "seed 003"
    summary = "all-or-nothing lock of many resources in one Lua script; releases only its own"
    signals_on_release = True
    name_is_hash_tag = False  # its keys' tag is ``hash_tag``, not the joined names

    def __init__(self, client: Any, resources: list[str] | str, *, hash_tag: str = "multi",
                 **options: Any) -> None:
        if isinstance(resources, str):
            resources = [resources]
        if not isinstance(resources, (list, tuple, set, frozenset)) or not resources:
            raise TypeError("multi needs a non-empty list of resource names")
        if not all(isinstance(r, str) and r for r in resources):
            raise TypeError("every resource must be a non-empty string")
        if not isinstance(hash_tag, str):  # was "argument of type 'int' is not iterable"
            raise TypeError(f"hash_tag must be a string, not {hash_tag!r}")
        if not hash_tag or "{" in hash_tag or "}" in hash_tag:
            raise ValueError("hash_tag must be a non-empty string without braces")
        self.resources = sorted(set(resources))
        super().__init__(client, ",".join(self.resources), **options)
        if self.ttl_ms is None:
            raise ValueError("the multi lock needs a ttl_ms: it is what frees a crashed holder")
        self.key = f"lock:{{{hash_tag}}}"  # the prefix; one key per resource below
        self.keys = [f"{self.key}:r:{r}" for r in self.resources]
        self.signals = [f"{self.key}:s:{r}" for r in self.resources]  # their wake lists
        self.fence_key = f"{self.key}:fence"  # no resource's key or list: they have r:, s:
        self._blocked_by = 0  # the index of the resource that refused our last attempt
        self._woken = False  # a wake-up of that resource's list woke us (notify)
        self._acquire_script = scripts.script(client, "multi_acquire")
        self._release_script = scripts.script(client, "multi_release")
        self._extend_script = scripts.script(client, "multi_extend")

    def _fence_at_least(self, issued: int) -> None:
        raise_counter(self.client, self.fence_key, issued)

    @property
    def signal_key(self) -> str:
        """The wake-up list of the resource that refused our last attempt."""
        return self.signals[self._blocked_by]

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        """``wait="notify"``: block on the refusing resource's list, then try, telling
        the script whether a wake-up woke us (it passes one on that it cannot use)."""
        found, timeout = lane(self.client), blpop_timeout(block_s)
        if found is None:
            self._woken = self.client.blpop([self.signal_key], timeout=timeout) is not None
        else:  # no redis-py retry with backoff: a Redis that died overran the timeout
            woken, = found.exchange([("BLPOP", self.signal_key, timeout)], 1)
            if isinstance(woken, Exception):
                raise woken
            self._woken = woken is not None
        token = new_token()
        return token, self._try_acquire(token)

    def _try_acquire(self, token: str) -> bool:
        woken_for = self._blocked_by + 1 if self._woken else 0
        self._woken = False
        ok, value, pttl = self._acquire_script(
            keys=[*self.keys, *self.signals, self.fence_key],
            args=[token, self.ttl_ms, woken_for, SIGNAL_TTL_MS])
        if ok:
            self.fencing_token = int(value)
            return True
        self._blocked_by = int(value) - 1
        self.holder_ttl_ms = int(pttl)
        return False

    def _release(self, token: str) -> None:
        freed = int(self._release_script(keys=[*self.keys, *self.signals],
                                          args=[token, SIGNAL_TTL_MS]))
        if freed != len(self.keys):
            raise LockNotOwned(f"only {freed} of {len(self.keys)} resources were still ours "
                               "(the rest expired or were taken)", self.name)

    def _extend(self, token: str, ttl_ms: int) -> None:
        if self._extend_script(keys=self.keys, args=[token, ttl_ms]) != scripts.OK:
            raise LockNotOwned("cannot extend: some resource is no longer ours", self.name)

    def _is_held(self, token: str) -> bool:
        values = self.client.mget(self.keys)
        return all((v.decode() if isinstance(v, bytes) else v) == token for v in values)

    def locked(self) -> bool:
        """Whether any of our resources is held by anyone."""
        return bool(self.client.exists(*self.keys))
