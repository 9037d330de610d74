"""Three prototypes that tried to make ``token``-notify's turns cheaper (session 18).

Under contention ``token``-notify alternates barges (the running holder re-takes the
lock) and *turns* (a waiter that slept its bound joins the queue and is handed the
lock). Every waiter takes one turn per bound, and a turn costs the lock more than a
barge, so the bound trades throughput against the p99 wait (docs/performance.md,
"Session 16" and "Session 18"). Each prototype attacks a part of a turn's cost; none
beat the fixed bound (figures in docs/performance.md, "Session 18"):

* ``x-deferred<N>``: the bound kept in Redis (``scripts/deferred.lua``). A failed try
  queues the waiter at once, due ``N`` ms later; a release with a due head hands it the
  lock. The waiter blocks in one BLPOP from its failure to its turn: no timer wakes it
  at the bound and it sends no join. It ran 8-15% slower than ``x-handoff<N>``: every
  barge now reads the queue's head and Redis's clock (+20-30 us of server CPU per
  acquisition), and the wake-up it saves was worth less than that.
* ``x-spinjoin<N>-<us>``: the waiter that joins at its bound spins up to ``us`` for its
  hand-off, so the turn's new holder is on a CPU already. 9-34% slower: on two cores
  the spinner takes the CPU the holder and Redis need.
* ``x-paced<K>``: the bound as ``K`` acquisitions at the lock's recent pace (seen from
  this process through the fencing tokens), at most 15 ms, so that it would follow the
  machine's speed. Below the fixed bounds at the same p99: each process sees its own
  pace (the barging one a faster one), so the waits came out unequal and the fairness
  lower (0.89 against 0.93-0.94).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from lockcore import scripts, waiting, wire
from lockcore.spin import readable
from lockcore.strategies.token import TokenLock

from .contenders import TTL_S, Adapter, Connections, Contender, Handle


@cache
def _deferred_lua() -> str:
    return resources.files(__package__).joinpath("scripts/deferred.lua").read_text("utf-8")


class DeferredTokenLock(TokenLock):
    """token-notify with its bound kept in Redis (``scripts/deferred.lua``): a failed try
    queues the waiter at once, due ``handoff_after_ms`` later; a release with a due head
    hands it the lock. A waiter blocks in one BLPOP from its failure to its turn: no
    client-side timer wakes it at the bound, and it sends no separate join."""

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        super().__init__(client, name, wait="notify", **options)
        self.bound_ms = round(self.handoff_after_s * 1000)
        self.deferred_keys = [self.key, f"{self.key}:dqueue", f"{self.key}:dleases",
                              self.fence_key, f"{self.key}:wake:"]
        text = _deferred_lua()
        self._deferred = scripts.registered(client, "x/deferred", lambda: text,
                                            make=lambda t: scripts._made(client, t))
        client.script_load(text)

    def _args(self, op: str, uuid: str, ring: str = "0") -> list[Any]:
        return [op, uuid, self.ttl_ms, self.lease_ms, self.bound_ms, ring]

    def _try_acquire(self, token: str) -> bool:
        acquired = self._took(self._deferred(keys=self.deferred_keys,
                                             args=self._args("acquire", self._uuid)))
        self._queued = not acquired
        return acquired

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        keys, sha = self.deferred_keys, self._deferred.sha
        commands: list[tuple[Any, ...]] = []
        if not self._queued:  # queue_first: join (ringing ourselves if we got it) unanswered
            commands += [("CLIENT", "REPLY", "SKIP"),
                         ("EVALSHA", sha, len(keys), *keys, *self._args("acquire", self._uuid,
                                                                         "1"))]
            self._queued = True
        commands += [("BLPOP", self.signal_key, waiting.blpop_timeout(block_s)),
                     ("EVALSHA", sha, len(keys), *keys, *self._args("acquire", self._uuid))]
        wake, reply = wire.round_trip(self.client, commands, replies=2)
        for answer in (wake, reply):
            if isinstance(answer, Exception):
                raise answer
        acquired = self._took(reply)
        self._queued = not acquired
        return self._uuid, acquired

    def _queue_release(self, uuid: str) -> Any:  # the same codes as fair.lua's
        return self._deferred(keys=self.deferred_keys, args=self._args("release", uuid))


class SpinJoinTokenLock(TokenLock):
    """token-notify whose waiter, having joined the queue at its bound, spins up to
    ``spin_us`` for the hand-off (the next release) before blocking: the turn's new
    holder is on a CPU already instead of waking from a blocked read."""

    def __init__(self, client: Any, name: str, *, spin_us: float, **options: Any) -> None:
        super().__init__(client, name, wait="notify", **options)
        self.spin_s = spin_us / 1e6

    def join_block_claim(self, block_s: float, *, join: bool) -> Any:
        found = wire.lane(self.client)
        if not join or found is None:
            return super().join_block_claim(block_s, join=join)
        commands = self.block_claim_commands(block_s, join=True)
        connection, ours = found.take()
        try:
            connection.send_packed_command(connection.pack_commands(commands))
            sock = connection._sock
            deadline = time.perf_counter() + self.spin_s
            while not readable(sock) and time.perf_counter() < deadline:
                pass
            wake, reply = wire._read_replies(connection, 2)
        except BaseException:
            connection.disconnect()
            raise
        finally:
            found.give_back(connection, ours)
        for answer in (wake, reply):
            if isinstance(answer, Exception):
                raise answer
        return reply


_PACE: dict[str, list[float]] = {}  # lock key -> [last time, last fence, s per acquisition]


class PacedTokenLock(TokenLock):
    """token-notify whose bound is ``overtakes`` acquisitions' worth of time at the lock's
    recent pace (seen from this process through the fencing tokens), capped at
    ``handoff_after_ms``: a waiter is overtaken by about that many barges."""

    def __init__(self, client: Any, name: str, *, overtakes: int, **options: Any) -> None:
        super().__init__(client, name, wait="notify", **options)
        self.overtakes = overtakes
        self.cap_s = self.handoff_after_s

    def _new_acquisition(self) -> None:
        super()._new_acquisition()
        pace = _PACE.get(self.key)
        if pace is not None and pace[2] > 0:
            self.handoff_after_s = min(self.cap_s, max(0.001, self.overtakes * pace[2]))

    def _on_acquired(self, token: str) -> None:
        super()._on_acquired(token)
        now, fence = self.clock.monotonic(), self.fencing_token
        pace = _PACE.get(self.key)
        if pace is None or fence is None or fence <= pace[1]:
            _PACE[self.key] = [now, fence or 0, pace[2] if pace else 0.0]
            return
        sample = min(0.01, (now - pace[0]) / (fence - pace[1]))
        pace[2] = sample if pace[2] <= 0 else pace[2] + (sample - pace[2]) / 8
        pace[0], pace[1] = now, fence


def _build(cls: type[TokenLock], **options: Any) -> Callable[..., Handle]:
    def build(conns: Connections, name: str) -> Handle:
        lock = cls(conns.redis(), name, ttl_ms=TTL_S * 1000, **options)
        return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, timeout=t)))
    return build


#: the prototypes, for ``--experimental``
TURN_COST: list[Contender] = [
    *(Contender(f"x-deferred{ms}", "experiment", "redis",
                f"token; bound {ms} ms kept in Redis, one BLPOP a turn",
                _build(DeferredTokenLock, handoff_after_ms=ms), "lockcore.strategies.token")
      for ms in (10, 15)),
    *(Contender(f"x-spinjoin{ms}-{us}", "experiment", "redis",
                f"token; bound {ms} ms, a joined waiter spins {us} us for its turn",
                _build(SpinJoinTokenLock, handoff_after_ms=ms, spin_us=us),
                "lockcore.strategies.token")
      for ms in (7, 10) for us in (300, 1000)),
    *(Contender(f"x-paced{n}", "experiment", "redis",
                f"token; bound {n} acquisitions at the lock's pace, at most 15 ms",
                _build(PacedTokenLock, overtakes=n, handoff_after_ms=15),
                "lockcore.strategies.token")
      for n in (20, 28, 36)),
]
