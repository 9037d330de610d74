"""Prototype waiting protocols for the token lock, benchmarked with ``--experimental``.

Not part of lockcore: they exist so the figures in docs/performance.md can be rerun.

* ``x-strict``: token-notify as it was from 22:10 UTC on 2026-11-21 until bounded barging
  replaced it: every release among waiters pushes one wake-up onto the shared
  ``:signal`` list, the woken waiter's attempt rides behind its BLPOP (a hand-off per
  acquisition), and a releaser among waiters queues before it tries again.
* ``x-handoff<N>``: lockcore's token-notify with ``handoff_after_ms=N`` (the default is
  what ``token-notify`` runs), to compare bounds within one run.
* ``x-nospin-notify``, ``x-nospin-fair``: lockcore's token-notify and fair on a client
  whose lane never spins (``lockcore.spin``): the A/B baseline of spinning, as lockcore
  was before session 17.

* ``x-turn<N>``: session 10's suggestion, "a waiter queues at once and still barges
  while queued". A failed try joins ``fair``'s FIFO queue at once (no sleep); while
  anyone queues, the holder may re-take the lock with ``SET NX`` only within its *turn*
  (``N`` ms from its grant, or from the first join); a release after the turn hands the
  lock to the head (``scripts/turn.lua``). It measured on the same throughput/p99 curve
  as ``x-handoff<N>`` (docs/performance.md, "Session 11").

* ``x-deferred<N>``, ``x-spinjoin<N>-<us>``, ``x-paced<K>``: session 18's attempts at
  cheaper turns, in ``turncost.py`` (its docstring says what each tried and measured).

* ``x-separate-try``: token-notify as it was before issue 6's hand-off: the releaser
  barges (tries at once), a woken waiter BLPOPs and then tries in a second round trip.
  The A/B baseline for lockcore's pipelined BLPOP + attempt and its queue-first rule
  (which adopted ``x-polite``'s idea: a releaser among waiters queues, it does not barge).

* ``x-polite``: a releaser whose release woke a waiter queues up (BLPOPs) before its
  next attempt instead of barging back in, so the woken waiter always wins. Each
  acquisition costs 3 round trips, none wasted, in FIFO order of the BLPOP queue.
* ``x-awake<N>``: Go's ``sync.Mutex`` on Redis. A release wakes a waiter only if no
  woken waiter is still on its way (the ``:awake`` mark, at most N ms old), so a
  barging holder is not followed by a wake-up per release. A woken waiter that loses
  the race marks itself starving; the next release hands the lock to it through a
  list only starving waiters block on, and the releaser queues instead of barging.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import redis

from lockcore import scripts, wire
from lockcore.base import DistributedLock, new_token
from lockcore.errors import LockNotOwned
from lockcore.strategies.handoff import RELEASED
from lockcore.strategies.token import TokenLock
from lockcore.waiting import (
    FINE_POLL_S,
    MAX_BLOCK_S,
    MIN_BLPOP_S,
    SERVER_TICK_S,
    SIGNAL_TTL_MS,
    blpop_timeout,
    wake_and_try,
)

from .contenders import TTL_S, Adapter, Connections, Contender, Handle, _lockcore
from .turncost import TURN_COST


@cache
def _lua(name: str) -> str:
    return resources.files(__package__).joinpath(f"scripts/{name}.lua").read_text("utf-8")


def _block_for(lock: TokenLock, remaining: float | None) -> float | None:
    """How long BLPOP may block, as lockcore's NotifyWaiter decides (None: just sleep)."""
    block = MAX_BLOCK_S if remaining is None else min(MAX_BLOCK_S, remaining)
    if lock.holder_ttl_ms is not None and lock.holder_ttl_ms > 0:
        block = min(block, lock.holder_ttl_ms / 1000)
    if block < SERVER_TICK_S + MIN_BLPOP_S:
        lock.clock.sleep(min(block, FINE_POLL_S))
        return None
    return blpop_timeout(block - SERVER_TICK_S)


class StrictTokenLock(TokenLock):
    """token-notify before bounded barging: the shared signal list, a hand-off per release."""

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        self._handle = new_token()  # the value of our wake-ups, to recognise our own
        self._woke_myself = False
        self._release_script = scripts.script(client, "token_release")

    @property
    def signal_key(self) -> str:
        return f"{self.key}:signal"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if self.queue_first and self.clock.monotonic() - self._released_at > 10.0:
            self.queue_first = False
        return DistributedLock.acquire(self, blocking, timeout)

    def _try_acquire(self, token: str) -> bool:
        self._woke_myself = False
        return self._took(self._acquire_script(keys=[self.key, self.fence_key],
                                               args=[token, self.ttl_ms]))

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        token = new_token()
        wake, reply = wake_and_try(self, self._acquire_script, [self.key, self.fence_key],
                                   [token, self.ttl_ms], block_s)
        self._woke_myself = wake is not None and wake[1] in (self._handle, self._handle.encode())
        return token, self._took(reply)

    def _on_acquired(self, token: str) -> None:
        DistributedLock._on_acquired(self, token)

    def _release(self, token: str) -> None:
        done = self._release_script(keys=[self.key, self.signal_key],
                                    args=[token, SIGNAL_TTL_MS, self._handle])
        if done == scripts.NOT_OWNED:
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        self._released_at = self.clock.monotonic()
        self.queue_first = (done == 2 and not self._woke_myself
                            and self.waiter.name == "notify")


class _QueueingTokenLock(StrictTokenLock):
    """A token lock whose release may ask its next acquire to wait in line first."""

    def __init__(self, client: Any, name: str, **options: Any) -> None:
        super().__init__(client, name, wait="notify", **options)
        self.yield_next = False
        self.queueing = False

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if self.yield_next and blocking:
            self.yield_next, self.holder_ttl_ms = False, None
            began = self.clock.monotonic()
            self.queueing = True
            try:
                self.waiter.wait(self, timeout, 0)
            finally:
                self.queueing = False
            if timeout is not None:
                timeout = max(0.0, timeout - (self.clock.monotonic() - began))
        return super().acquire(blocking, timeout)


class PoliteWaiter:
    name = "notify"

    def wait(self, lock: Any, remaining: float | None, attempt: int) -> None:
        if (block := _block_for(lock, remaining)) is not None:
            pipe = lock.client.pipeline(transaction=False)  # mark and block: one round trip
            pipe.set(lock.waiting_key, 1, px=int(MAX_BLOCK_S * 1000) + 200)
            pipe.blpop([lock.signal_key], timeout=block)
            pipe.execute()


class PoliteTokenLock(_QueueingTokenLock):
    def __init__(self, client: Any, name: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        self.waiting_key = f"{self.key}:waiting"
        self._polite_release = client.register_script(_lua("polite_release"))
        self.waiter = PoliteWaiter()

    def _release(self, token: str) -> None:
        done = self._polite_release(keys=[self.key, self.signal_key, self.waiting_key],
                                    args=[token, SIGNAL_TTL_MS])
        if done == 0:
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        self.yield_next = done == 2


class AwakeWaiter:
    name = "notify"

    def wait(self, lock: Any, remaining: float | None, attempt: int) -> None:
        lock.starving = lock.starving or lock.woken  # woken, tried, and still lost
        lock.woken = False
        if (block := _block_for(lock, remaining)) is None:
            return
        if lock.starving:
            pipe = lock.client.pipeline(transaction=False)
            pipe.set(lock.starving_key, 1, px=int(MAX_BLOCK_S * 1000))
            pipe.blpop([lock.starve_key, lock.signal_key], timeout=block)
            got = pipe.execute()[1]
        else:
            keys = [lock.signal_key, lock.starve_key] if lock.queueing else [lock.signal_key]
            got = lock.client.blpop(keys, timeout=block)
        lock.woken = got is not None


class AwakeTokenLock(_QueueingTokenLock):
    def __init__(self, client: Any, name: str, *, awake_ms: int = 5, **options: Any) -> None:
        super().__init__(client, name, **options)
        self.awake_ms = awake_ms
        self.awake_key, self.starving_key = f"{self.key}:awake", f"{self.key}:starving"
        self.starve_key = f"{self.key}:starve"
        self.woken = self.starving = False
        self._awake_acquire = client.register_script(_lua("awake_acquire"))
        self._awake_release = client.register_script(_lua("awake_release"))
        self.waiter = AwakeWaiter()

    def _try_acquire(self, token: str) -> bool:
        ok, value = self._awake_acquire(keys=[self.key, self.fence_key, self.awake_key],
                                        args=[token, self.ttl_ms, int(self.woken)])
        if ok:
            self.fencing_token, self.woken, self.starving = int(value), False, False
            return True
        self.holder_ttl_ms = int(value)
        return False

    def _release(self, token: str) -> None:
        done = self._awake_release(
            keys=[self.key, self.signal_key, self.awake_key, self.starving_key,
                  self.starve_key],
            args=[token, SIGNAL_TTL_MS, self.awake_ms])
        if done == 0:
            raise LockNotOwned("the lock expired or is held by someone else", self.name)
        self.yield_next = done == 2


class SeparateTryTokenLock(StrictTokenLock):
    """lockcore's token lock before the pipelined wake-up: BLPOP, then try (2 round trips)."""

    def _block_then_try(self, block_s: float) -> None:
        return None

    def _release(self, token: str) -> None:
        super()._release(token)
        self.queue_first = False  # and the releaser tries again at once (it barges)


@cache
def turn_script() -> str:
    """``fair.lua`` with ``scripts/turn.lua``'s sections inserted before their anchors."""
    header, *sections = _lua("turn").split("\n--@before: ")
    text = scripts.source("fair")
    for section in sections:
        anchor, body = section.split("\n", 1)
        if text.count(f"\n{anchor}\n") != 1:
            raise ValueError(f"turn.lua: {anchor!r} is not one line of fair.lua")
        text = text.replace(f"\n{anchor}\n", f"\n{body.rstrip()}\n{anchor}\n")
    return f"{header}\n{text}"


class TurnTokenLock(TokenLock):
    """token-notify with turns: a waiter queues at once; a holder re-takes (barges) only
    while its turn lasts (``turn_ms`` from its grant, or from the first join); a release
    after the turn hands the lock to the queue's head (``scripts/turn.lua``)."""

    IDLE_S = 0.03  # a queued waiter looks again this often (a lock freed within a turn)

    def __init__(self, client: Any, name: str, *, turn_ms: float, **options: Any) -> None:
        super().__init__(client, name, wait="notify", **options)
        self.turn_ms = turn_ms
        self.queue_keys = [*self.queue_keys, f"{self.key}:turn"]
        text = turn_script()
        self._queue_script = scripts.registered(client, "x/turn", lambda: text,
                                                make=lambda t: scripts._made(client, t))
        client.script_load(text)

    def _queue_args(self, ring: str = "0") -> list[Any]:
        return [*super()._queue_args(ring), self.turn_ms]

    def _op(self, op: str, uuid: str) -> Any:
        return self._queue_script(keys=self.queue_keys, args=[
            op, uuid, self.ttl_ms, self.lease_ms, "0", self.turn_ms])

    def _try_acquire(self, token: str) -> bool:
        if self._queued:
            return self._took(self._queue_try())
        return self._took(self._op("try", self._uuid))

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        join, self._queued = not self._queued, True
        reply = self.join_block_claim(min(block_s, self.IDLE_S), join=join)
        return self._uuid, self._took(reply)

    def _queue_release(self, uuid: str) -> Any:
        done = self._op("release", uuid)
        return RELEASED if done == 4 else done  # 4: freed within the turn, not handed on


def _experiment(kind: str, **options: Any) -> Callable[..., Handle]:
    def build(conns: Connections, name: str) -> Handle:
        extra = {"wait": "notify"} if kind in ("separate", "strict") else {}
        cls = {"turn": TurnTokenLock, "polite": PoliteTokenLock, "awake": AwakeTokenLock,
               "separate": SeparateTryTokenLock, "strict": StrictTokenLock}[kind]
        lock = cls(conns.redis(), name, ttl_ms=TTL_S * 1000, **options, **extra)
        return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, timeout=t)))
    return build


class _Blocking:
    """A lane's spinner that never spins: every reply is read blocking."""

    def wait(self, connection: Any) -> None:
        pass


def never_spin(client: redis.Redis) -> redis.Redis:
    """``client``, whose lane now reads every reply blocking (lockcore before session
    17); the ``x-nospin`` contenders and ``python -m loadtest.bench.spinning`` use it."""
    lane = wire.lane(client)
    assert lane is not None, "only a client with a lane spins"
    lane.spinner = _Blocking()  # type: ignore[assignment]
    return client


def _nospin(strategy: str, **options: Any) -> Callable[..., Handle]:
    def build(conns: Connections, name: str) -> Handle:
        import lockcore

        pool = conns.redis().connection_pool  # a client of our own: its lane is ours too
        client = never_spin(redis.Redis(connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class, **pool.connection_kwargs)))
        lock = lockcore.create(strategy, client, name, ttl_ms=TTL_S * 1000, **options)
        return Adapter(lock, lambda t: bool(lock.acquire(blocking=True, timeout=t)))
    return build


#: what ``--experimental`` adds to a run
EXPERIMENTS: list[Contender] = [
    Contender("x-strict", "experiment", "redis", "token-notify before: hand-off per release",
              _experiment("strict"), "lockcore.strategies.token"),
    *(Contender(f"x-handoff{ms}", "experiment", "redis", f"token-notify handoff_after_ms={ms}",
                _lockcore("token", "redis", wait="notify", handoff_after_ms=ms),
                "lockcore.strategies.token") for ms in (0, 5, 7, 10, 12, 15, 20, 40)),
    Contender("x-nospin-notify", "experiment", "redis", "token-notify, lane never spins",
              _nospin("token", wait="notify"), "lockcore.spin"),
    Contender("x-nospin-fair", "experiment", "redis", "fair, lane never spins",
              _nospin("fair", wait="notify"), "lockcore.spin"),
    *(Contender(f"x-turn{ms}", "experiment", "redis", f"token; queue at once, {ms} ms turns",
                _experiment("turn", turn_ms=ms), "lockcore.strategies.token")
      for ms in (0.3, 0.6, 0.8, 1, 1.5, 2)),
    *TURN_COST,
    Contender("x-separate-try", "experiment", "redis", "token-notify before: barge, BLPOP, try",
              _experiment("separate"), "lockcore.strategies.token"),
    Contender("x-polite", "experiment", "redis", "token; releaser queues behind the woken",
              _experiment("polite"), "lockcore.strategies.token"),
    Contender("x-awake5", "experiment", "redis", "token; one awake waiter (5 ms), starvation",
              _experiment("awake", awake_ms=5), "lockcore.strategies.token"),
    Contender("x-awake20", "experiment", "redis", "token; one awake waiter (20 ms), starvation",
              _experiment("awake", awake_ms=20), "lockcore.strategies.token"),
]
