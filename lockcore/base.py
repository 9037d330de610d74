"""``DistributedLock``: one interface, every strategy behind it.

The base class owns what every lock shares: the retry loop and its deadline, the
waiting policy (poll, backoff or notify, see ``waiting.py``), logging, the optional
watchdog, lost-lock reporting and the context manager. A strategy implements only

* ``_try_acquire(token) -> bool``  one attempt, never blocks;
* ``_release(token)``              raises ``LockNotOwned`` if ``token`` no longer holds it;
* ``_extend(token, ttl_ms)``       only if the lock expires;
* ``_is_held(token) -> bool``      optional, defaults to GET == token;
* ``_block_then_try(block_s)``     optional, for ``wait="notify"``: block on the signal
  and make the next attempt in the same round trip (``waiting.wake_and_try``).

``token`` is fresh and random for every acquisition and belongs to this *handle*,
not to a thread-local: two asyncio tasks sharing a thread cannot release each other's
locks, and under gevent's monkey-patching (where ``threading.local`` is per greenlet)
a held lock passed to another greenlet can still be released there (redis-py's
``thread_local=False`` lesson). So a handle is one
holder at a time. Threads that share one handle take turns on it, as they would on a
``threading.Lock``: a thread acquiring while another acquires or holds with the same
handle waits for the handle first, within its timeout (``_occupy``), and then for
the lock. Like ``threading.Lock``, any thread may release it (the shop passes a held
lock from one greenlet to the next); acquiring it again in the thread that holds it is
``LockError`` (not reentrant).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar

from .clock import SYSTEM_CLOCK, Clock
from .errors import LockError, LockLost, LockNotOwned, LockTimeout
from .poolfull import MaxConnectionsError, patiently, pause
from .waiting import A_YEAR_MS, Waiter, make_waiter, signal_release

logger = logging.getLogger(__name__)

LostCallback = Callable[["DistributedLock", str], None]

DEFAULT_TTL_MS = 10_000
#: a lock held longer than a year is a bug; Redis refuses a PX past its 64-bit clock
MAX_TTL_MS = A_YEAR_MS
#: the largest ``fence_at_least`` floor: its script compares in Lua's doubles, exact to
#: 2**53; past Redis's 64-bit range the counter broke for good (INCR refused it)
MAX_ISSUED = 2**53 - 1


#: the longest ``timeout`` taken, in seconds: a year, as every duration option. A
#: threading wait refuses one past ``threading.TIMEOUT_MAX`` (292 years): 1e10 raised
#: ``OverflowError`` out of a local notify-waiter and a shared handle's second thread,
#: and kazoo's out of a zookeeper acquire (a lockcore audit). None waits for ever.
MAX_TIMEOUT_S = A_YEAR_MS / 1000


def check_timeout(timeout: Any) -> None:
    """``ValueError`` unless ``timeout`` is None (wait forever) or a number of seconds
    from 0 to a year (``MAX_TIMEOUT_S``)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 <= timeout <= MAX_TIMEOUT_S:  # nan fails both comparisons
        raise ValueError(f"timeout must be None (no limit) or a number of seconds from 0 "
                         f"to {MAX_TIMEOUT_S:.0f} (a year), not {timeout!r}")


def acquire_arguments(blocking: Any, timeout: Any) -> tuple[bool, float | None]:
    """``acquire``'s arguments as the conventions users bring: ``blocking=None`` is the
    default, blocking (redis-py's ``Lock.acquire``); ``timeout=-1`` waits for ever
    (``threading.Lock.acquire``). Other values are checked by ``_check_acquire``."""
    if blocking is None:
        blocking = True
    if timeout is not None and not isinstance(timeout, bool) and timeout == -1:
        timeout = None
    return bool(blocking), timeout


def whole_ms(name: str, value: Any, number: str = "a number of milliseconds") -> int:
    """``value`` as the whole milliseconds Redis takes (``PX``, ``PEXPIRE``): an int, or
    a float rounded up (``2.5 * 1000``; never shorter than asked), from 1 to a year.

    :raises TypeError: not a number (``True`` is not a duration either).
    :raises ValueError: not finite, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {number}, not {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be between 1 and {MAX_TTL_MS} (a year), "
                             f"not {value!r}")
        value = math.ceil(value)
    if not 0 < value <= MAX_TTL_MS:
        raise ValueError(f"{name} must be between 1 and {MAX_TTL_MS} (a year), not {value!r}")
    return int(value)


def whole_ttl_ms(ttl_ms: Any) -> int:
    """``whole_ms`` for a ``ttl_ms`` (which may also be None: checked by the caller)."""
    return whole_ms("ttl_ms", ttl_ms, "a number of milliseconds or None")


def new_token() -> str:
    """A random value that no other acquisition will ever use (128 bits)."""
    return os.urandom(16).hex()


def check_redis_client(client: Any, who: str) -> None:
    """Refuse, at ``create``, what is not a synchronous redis-py client: anything
    without ``execute_command``, the class itself (a missing ``()``), a pipeline (its
    commands answer at ``execute``) and an asyncio client (they answer a coroutine).
    An audit found the last three accepted: a pipeline's or a coroutine's truthy
    "reply" let every ``setnx`` handle hold the lock at once, with no key in Redis."""
    kind = type(client).__name__
    if isinstance(client, type):
        raise TypeError(f"{who} needs a redis-py client, not the class {client.__name__} "
                        "(call it: redis.Redis(...))")
    if not callable(getattr(client, "execute_command", None)):
        raise TypeError(f"{who} needs a redis-py client, not {kind}")
    from redis.client import Pipeline

    if isinstance(client, Pipeline) or kind in ("ClusterPipeline", "AsyncPipeline"):
        raise TypeError(f"{who} needs a redis-py client, not a pipeline ({kind}): a "
                        "lock must see each reply before its next command")
    if inspect.iscoroutinefunction(client.execute_command) \
            or type(client).__module__.startswith("redis.asyncio"):
        raise TypeError(f"{who} needs a synchronous redis-py client, not {kind} from "
                        f"{type(client).__module__} (lockcore does not await)")


class DistributedLock(ABC):
    """A named lock whose state lives outside this process (except ``local``)."""

    #: registry name, whether it is safe for mutual exclusion, which seed it comes from
    strategy: ClassVar[str]
    safe: ClassVar[bool]
    origin: ClassVar[str]
    summary: ClassVar[str]
    #: True when the lock has a TTL (and so ``extend`` and the watchdog make sense)
    expires: ClassVar[bool] = True
    #: True when ``_release`` itself wakes a notify-waiter (inside its Lua script)
    signals_on_release: ClassVar[bool] = False
    #: True when the backend must be a redis-py client (checked at construction)
    needs_redis: ClassVar[bool] = True
    #: True when the name is the hash tag of the lock's Redis keys (``lock:{name}``)
    name_is_hash_tag: ClassVar[bool] = True
    #: keyword options of a base class that this class's constructor sets itself and
    #: refuses from its caller (``token``'s ``lease_ms``): not listed as its options
    fixed_options: ClassVar[frozenset[str]] = frozenset()
    #: True for a lock that lives in the process (``local``): a forked child's copy is
    #: its own, and releases in the child (see ``_forked``)
    process_local: ClassVar[bool] = False

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        ttl_ms: int | None = DEFAULT_TTL_MS,
        wait: str = "poll",
        poll_ms: float = 50,
        max_poll_ms: float = 1_000,
        watchdog: bool = False,
        on_lost: LostCallback | None = None,
        timeout: float | None = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError("lock name must be a non-empty string")
        try:  # a lone surrogate ("\udcff", from a bad decode) failed only at acquire
            name.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"lock name {name!r} is not valid Unicode: {error.reason} "
                             f"at {error.start}") from None
        if self.name_is_hash_tag and name.startswith("}"):  # "lock:{}x}": an empty tag
            raise ValueError(f"lock name {name!r} may not start with '}}': its keys "
                             "(lock:{name}, lock:{name}:fence, ...) would lose their shared "
                             "Redis Cluster hash tag and land in different slots")
        if ttl_ms is not None:
            ttl_ms = whole_ttl_ms(ttl_ms)
        # -1 waits for ever here as in ``acquire`` (refused here only: a lockcore audit)
        timeout = acquire_arguments(True, timeout)[1]
        check_timeout(timeout)
        if not isinstance(watchdog, bool):  # "false" is truthy: it switched the watchdog on
            raise TypeError(f"watchdog must be True or False, not {watchdog!r}")
        if self.needs_redis:
            check_redis_client(client, f"the {self.strategy} lock")
        if on_lost is not None and not callable(on_lost):  # found only when a lock was lost
            raise TypeError(f"on_lost must be a callable (lock, reason), not {on_lost!r}")
        if not all(callable(getattr(clock, m, None)) for m in ("monotonic", "time", "sleep")):
            raise TypeError("clock needs monotonic(), time() and sleep() (like "
                            f"lockcore.clock.SYSTEM_CLOCK), not {clock!r}")  # was: at acquire
        if watchdog and not self.expires:
            raise ValueError(f"a watchdog renews a lock that expires; {self.strategy!r} "
                             "never expires (nothing to renew): leave watchdog off")
        if watchdog and ttl_ms is None:
            raise ValueError("a watchdog renews a lock that expires; with ttl_ms=None "
                             "it never does (nothing to renew): give a ttl_ms")
        self.client = client
        self.name = name
        self.key = f"lock:{{{name}}}"  # the braces are a Redis Cluster hash tag
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.waiter: Waiter = make_waiter(wait, poll_ms=poll_ms, max_poll_ms=max_poll_ms)
        self.fencing_token: int | None = None
        self.on_lost = on_lost
        self.watchdog_enabled = watchdog
        #: how long ``with lock:`` waits before raising ``LockTimeout`` (None: forever)
        self.default_timeout = timeout
        #: PTTL of the current holder seen by the last failed attempt (-1/None: unknown)
        self.holder_ttl_ms: int | None = None
        self._token: str | None = None
        self._owner_pid = os.getpid()  # the process that took the lock (see release)
        self._tried_at = 0.0  # when the last attempt was sent (the watchdog's first ttl)
        self._lost_reason: str | None = None
        self._mutex = threading.RLock()  # serialises a renewal against a release
        self._watchdog: Any = None
        #: while held, for a lock nothing else frees: what lets it go if the handle is
        #: collected unreleased (``_let_go_if_collected``)
        self._orphan: weakref.finalize[Any, Any] | None = None
        #: the thread acquiring with, or holding, this handle (``_occupy``)
        self._occupant: int | None = None
        self._vacated = threading.Condition(threading.Lock())
        #: set by a release that woke a waiter: the next blocking acquire waits first
        self.queue_first = False

    # -- what a strategy implements -------------------------------------------------
    @abstractmethod
    def _try_acquire(self, token: str) -> bool:
        """One attempt; True if this token now holds the lock."""

    @abstractmethod
    def _release(self, token: str) -> None:
        """Give the lock up; raise ``LockNotOwned`` if ``token`` no longer holds it."""

    def _extend(self, token: str, ttl_ms: int) -> None:
        raise NotImplementedError(f"{self.strategy!r} locks do not expire")

    def _block_then_try(self, block_s: float) -> tuple[str, bool] | None:
        """Optional: BLPOP the signal and make an attempt in one round trip (notify)."""
        return None

    def _is_held(self, token: str) -> bool:
        value = self.client.get(self.key)
        if isinstance(value, bytes):
            value = value.decode()
        return bool(value == token)

    # -- the public interface ------------------------------------------------------
    @property
    def signal_key(self) -> str:
        return f"{self.key}:signal"

    @property
    def token(self) -> str | None:
        """The random value identifying the current acquisition, if held."""
        return self._token

    @property
    def lost(self) -> bool:
        """True once the watchdog or a check found that the lock was lost."""
        return self._lost_reason is not None

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; False when not blocking or when ``timeout`` seconds pass
        (``None`` or ``-1``: no limit)."""
        blocking, timeout = acquire_arguments(blocking, timeout)
        return self._acquire_occupied(blocking, timeout, self._acquire)

    def _acquire_occupied(self, blocking: bool, timeout: float | None,
                          attempt: Callable[[bool, float | None], bool]) -> bool:
        """``attempt`` with this handle occupied by the calling thread (``_occupy``);
        the handle is vacated again unless ``attempt`` took the lock."""
        claim = self._occupy(blocking, timeout)
        if claim is None:
            return False
        outer, timeout = claim
        acquired = False
        try:
            acquired = attempt(blocking, timeout)
            return acquired
        finally:
            if outer and not acquired:
                self._vacate()

    def _occupy(self, blocking: bool, timeout: float | None) -> tuple[bool, float | None] | None:
        """Claim this handle for the calling thread: ``(outer, timeout left)``, or None
        if another thread kept it occupied past ``timeout`` (or ``blocking`` is False).

        A handle is one holder (its token and, for queue locks, its place in line are
        the handle's): a second thread acquiring with it at the same time would
        overwrite them, so it waits here until the first thread's acquire fails or its
        lock is released, as threads sharing a ``threading.Lock`` wait for each other.
        ``outer`` is False when the calling thread occupies it already (it holds the
        lock: ``_check_acquire`` then refuses, and the handle stays occupied)."""
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout makes no sense with blocking=False")
            check_timeout(timeout)
        me = threading.get_ident()
        with self._vacated:
            if self._occupant is None or self._occupant == me:
                outer, self._occupant = self._occupant is None, me
                return outer, timeout
            if not blocking:
                return None
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._occupant is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._vacated.wait(left)
            self._occupant = me
            return True, None if deadline is None else max(0.0, deadline - time.monotonic())

    def _vacate(self) -> None:
        """The handle is free for another thread's acquire (released, or not taken)."""
        with self._vacated:
            self._occupant = None
            self._vacated.notify()

    def _check_acquire(self, blocking: bool, timeout: float | None) -> None:
        """What every ``acquire`` refuses: a held handle (not reentrant), a bad timeout."""
        if self._token is not None:
            raise LockError("this handle already holds the lock; locks are not reentrant",
                            self.name)
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout makes no sense with blocking=False")
            check_timeout(timeout)

    def _acquire(self, blocking: bool, timeout: float | None) -> bool:
        self._check_acquire(blocking, timeout)
        self.fencing_token = None  # a failed acquire shows none, not the last hold's
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        attempt, token, acquired = 0, "", False
        if blocking and self.queue_first and timeout != 0:
            # Our last release woke a waiter: a try now would only fail, so queue first.
            self.holder_ttl_ms = None
        else:
            token = new_token()
            logger.debug("trying %s lock %r", self.strategy, self.name)
            acquired = self._attempt(token)
        self.queue_first = False
        while not acquired:
            if not blocking:
                return False
            remaining = None if deadline is None else deadline - self.clock.monotonic()
            if remaining is not None and remaining <= 0:
                # contention is not an error (errors.py): a busy shop timed out a buyer
                # a second and printed a WARNING for each, on stderr
                logger.info("gave up on %s lock %r after %.3fs", self.strategy, self.name,
                            timeout)
                return False
            # A waiter may make the next attempt itself (notify: in the same round trip
            # as its BLPOP); otherwise the wait is over and we try again here.
            self._tried_at = self.clock.monotonic()  # the wait may make the attempt
            try:
                tried = self.waiter.wait(self, remaining, attempt)
            except MaxConnectionsError:  # nothing sent (poolfull.py): the wait is over
                pause()
                tried = None
            attempt += 1
            if tried is None:
                token = new_token()
                logger.debug("trying %s lock %r (attempt %d)", self.strategy, self.name,
                             attempt)
                acquired = self._attempt(token)
            else:
                token, acquired = tried
        self._on_acquired(token)
        return True

    def _attempt(self, token: str) -> bool:
        """``_try_acquire``; a pool with no free connection is a try that did not take
        the lock (nothing was sent: ``poolfull.py``)."""
        self._tried_at = self.clock.monotonic()  # a ttl it sets runs from no earlier
        try:
            return self._try_acquire(token)
        except MaxConnectionsError:
            pause()
            return False

    def release(self) -> None:
        """Give the lock up. Raises ``LockNotOwned`` if this handle no longer holds it, or
        if this process is a child forked while it held it (the lock stays the parent's)."""
        self._stop_watchdog()  # a release always wins over a pending renewal
        with self._mutex:
            token, self._token = self._token, None
            if token is None:  # (another thread may be acquiring with it: stays occupied)
                raise LockNotOwned("release of a lock this handle does not hold", self.name)
            if self._forked():
                raise LockNotOwned(
                    f"release in process {os.getpid()} of a lock process {self._owner_pid} "
                    "took: a fork copied the handle, and the lock stays the parent's",
                    self.name)
            if self._orphan is not None:  # released: nothing to let go when collected
                self._orphan.detach()
                self._orphan = None
            released = False
            try:
                patiently(lambda: self._release(token))  # a full pool: wait for one
                released = True
            finally:
                try:
                    if not self.signals_on_release:
                        patiently(lambda: signal_release(self))  # Redis I/O: may raise
                except Exception as exc:  # noqa: BLE001 - see below
                    # The lock is free (or the release's own error is the news): a
                    # notify-waiter not woken wakes at its next BLPOP timeout (1 s at
                    # most). Raised, it said "not released" of a lock that was (a user
                    # without EVALSHA: a lockcore audit), and a retry said LockNotOwned.
                    if released:
                        logger.warning("released %s lock %r, but could not wake a waiter: "
                                       "%s", self.strategy, self.name, exc)
                finally:
                    self._vacate()
            logger.debug("released %s lock %r", self.strategy, self.name)

    def extend(self, ttl_ms: int | None = None) -> None:
        """Replace the remaining TTL with ``ttl_ms`` (default: the lock's ttl). Owner only."""
        if not self.expires:
            raise NotImplementedError(f"{self.strategy!r} locks do not expire")
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        try:
            ttl = whole_ttl_ms(ttl)
        except TypeError as error:  # extend always said ValueError
            raise ValueError(str(error)) from None
        with self._mutex:
            if self._token is None:
                raise LockNotOwned("extend of a lock this handle does not hold", self.name)
            try:
                self._extend(self._token, ttl)
                return
            except LockNotOwned as error:
                lost = error
        # outside the mutex: an ``on_lost`` callback may use this handle (release it,
        # acquire it again), and a release waits for the mutex
        self._mark_lost("extend found the lock no longer ours")
        raise lost

    def fence_at_least(self, issued: int) -> None:
        """Make every later ``fencing_token`` of this resource greater than ``issued``.

        A fencing counter lives in the lock's backend; a Redis restarted without
        persistence starts it again at 1, and the next holders' tokens fall below those
        its storage has already seen. Whoever keeps the tokens (the shop's orders) then
        seeds the counter with the highest it holds. Never lowers the counter.
        A lock without fencing tokens ignores it (``fencing_token`` stays None), and so
        does ``zookeeper``: its tokens are sequence numbers ZooKeeper keeps on its disk.
        ``redlock`` raises a majority of its nodes, or raises ``LockError``.
        """
        if isinstance(issued, bool) or not isinstance(issued, int) \
                or not 0 <= issued <= MAX_ISSUED:
            raise ValueError(f"issued must be an int from 0 to 2**53 - 1 (the counter's "
                             f"Lua compares it as a double), not {issued!r}")
        if issued > 0:
            self._fence_at_least(issued)

    def _fence_at_least(self, issued: int) -> None:
        """Raise this lock's fencing counter; only locks that have one override it."""
        return None

    def held(self) -> bool:
        """Ask the backend whether this handle still holds the lock."""
        token = self._token
        if token is None or self._lost_reason is not None:
            return False
        if self._is_held(token):
            return True
        self._mark_lost("the backend no longer has our token")
        return False

    def locked(self) -> bool:
        """Whether anyone holds the lock (like ``threading.Lock.locked``)."""
        return bool(self.client.exists(self.key))

    def __enter__(self) -> DistributedLock:
        timeout = self.default_timeout
        if not self.acquire(blocking=True, timeout=timeout):
            raise LockTimeout(f"could not acquire within {timeout}s", self.name)
        return self

    def _forked(self) -> bool:
        """Whether this is a child forked while the handle held the lock. The child's copy
        carries the parent's token: its release deleted the parent's key mid-section, and
        a rival took the lock (a lockcore audit: a child that unwound ``with``)."""
        return not self.process_local and self._owner_pid != os.getpid()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._forked():  # a child leaving its parent's ``with``: not its lock
            self._token = None
            return
        if self._token is None:  # released inside the block (or by a thread sharing it)
            if exc_type is not None:  # the block's exception is the news
                return
            raise LockNotOwned("the lock was released before leaving `with`", self.name)
        reason = self._lost_reason
        try:
            self.release()
        except LockNotOwned:
            if exc_type is not None:
                logger.warning("%s lock %r was lost while an exception was raised",
                               self.strategy, self.name)
                return
            # We held it on entering ``with``, so "not owned" now means it was lost
            # (usually its TTL ran out mid-section): say so with the subclass.
            raise LockLost(f"lock lost while held: {reason or 'it expired or was taken'}",
                           self.name) from None
        except Exception as error:  # the backend is down too, say
            if exc_type is not None:  # the body's exception is the news; it propagates
                logger.warning("%s lock %r: release failed while an exception was raised: "
                               "%r", self.strategy, self.name, error)
                return
            if reason is None:
                raise
            # The watchdog already found the lock gone: that is the news, not the
            # release that could not reach the backend to make sure.
            raise LockLost(f"lock lost while held: {reason}", self.name) from error
        if reason is not None and exc_type is None:
            raise LockLost(f"lock lost while held: {reason}", self.name)

    def __repr__(self) -> str:
        state = "held" if self._token else "free"
        return f"<{type(self).__name__} {self.name!r} {state}>"

    # -- internals -----------------------------------------------------------------
    def _on_acquired(self, token: str) -> None:
        self._token, self._owner_pid = token, os.getpid()
        self._lost_reason = None
        logger.info("acquired %s lock %r (fencing token %s)", self.strategy, self.name,
                    self.fencing_token)
        if self.watchdog_enabled:
            from .watchdog import Watchdog

            assert self.ttl_ms is not None
            self._watchdog = Watchdog(self, self.ttl_ms / 3000, since=self._tried_at)

    def _let_go_if_collected(self, let_go: Callable[..., Any], *args: Any) -> None:
        """Held by a lock nothing else frees (no TTL: ``local``'s, ``zookeeper``'s): call
        ``let_go(*args)`` if this handle is garbage-collected before its release, as a
        Redis lock's TTL frees a dropped handle's key. ``args`` must not refer to the
        handle. Not at exit: the process's end lets go of both."""
        self._orphan = weakref.finalize(self, let_go, *args)
        self._orphan.atexit = False

    def _stop_watchdog(self) -> None:
        dog, self._watchdog = self._watchdog, None
        if dog is not None:
            dog.stop()

    def _mark_lost(self, reason: str) -> None:
        if self._lost_reason is not None:
            return
        self._lost_reason = reason
        logger.warning("%s lock %r lost: %s", self.strategy, self.name, reason)
        if self.on_lost is not None:
            try:
                self.on_lost(self, reason)
            except Exception:  # a callback must not kill the watchdog thread
                logger.exception("on_lost callback for %r failed", self.name)
