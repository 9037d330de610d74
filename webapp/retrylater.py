"""Clean-up that a backend was down for, tried again by this process's later purchases.

A failed purchase must undo what it did (drop its buyer's reservation, give its units
back, settle an order write whose outcome is unknown). When Redis or the database is
down for that too, the undo waits here, and each purchase of this worker first drains
what waits, oldest first, at most once a ``every_s``: while the backend hangs, a
purchase does not wait a timeout for someone else's undo before waiting one for itself.
The drain stops at the first undo that fails again (the backend is still down). A
served worker also drains them every few seconds by itself (``drain_every``), and
once more as it exits (``last_chance``): the queues live in the worker's memory, so
what is still waiting then is logged, one line per undo, for an operator to settle.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from lockcore import LockNotOwned

from .logthrottle import PER_REQUEST

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: every queue made, for ``drain_every``
QUEUES: list[RetryLater[Any]] = []


class RetryLater(Generic[T]):
    """Undos waiting for a backend; ``drain`` tries them with ``attempt``."""

    def __init__(self, attempt: Callable[[T], bool], every_s: float = 1.0,
                 most: int = 100_000) -> None:
        #: one undo: True once done (or no longer needed), False if it failed again
        self.attempt = attempt
        self.every_s = every_s
        self.waiting: collections.deque[T] = collections.deque(maxlen=most)
        #: when the next drain may run (``time.monotonic``)
        self.next_drain = 0.0
        QUEUES.append(self)

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, entry: T) -> None:
        self.waiting.append(entry)

    def try_all(self, until: float) -> list[T]:
        """Try every waiting undo once, until ``until`` (``time.monotonic``); return
        those still undone (the failed ones and those there was no time for)."""
        left: list[T] = []
        while self.waiting:
            entry = self.waiting.popleft()
            if time.monotonic() >= until or not self.attempt(entry):
                left.append(entry)
        return left

    def drain(self) -> None:
        """Try the waiting undos in order, at most once every ``every_s``; stop at the
        first that fails again. Nothing waiting: returns at once (a purchase calls it
        every time), and the next drain is not put off."""
        if not self.waiting or time.monotonic() < self.next_drain:
            return
        self.next_drain = time.monotonic() + self.every_s  # also keeps other greenlets out
        while True:
            try:  # taken off first: a concurrent drain (another greenlet) takes the next
                entry = self.waiting.popleft()
            except IndexError:
                return
            if not self.attempt(entry):
                self.waiting.appendleft(entry)
                return


@dataclasses.dataclass(frozen=True)
class UnsettledLock:
    """A lock whose acquire or release raised with Redis's reply lost (a paused Redis):
    Redis may hold it for nobody until its TTL (it ran the acquire when it woke, or never
    ran the release). ``retry`` lets it go by the handle's ``settle()``; False while Redis
    still does not answer."""

    settle: Callable[[], bool]
    sku: str
    #: whose lock, for the log: the sale's strategy (its stock lock), "reset" or "settle"
    of: str
    #: what ``last_chance`` tells an operator of one still unsettled at exit
    remedy: str = "its lock expires with its TTL"

    def retry(self) -> bool:
        try:
            if self.settle():
                logger.warning("%s lock of %s, held by Redis for nobody after a lost reply, "
                               "is let go", self.of, self.sku)
        except Exception as exc:  # noqa: BLE001 - still unreachable: tried again later
            logger.warning("%s lock of %s: could not settle it yet; will retry: %s",
                           self.of, self.sku, type(exc).__name__)
            return False
        return True


def release_or_settle_later(lock: Any, sku: str, of: str, queue: RetryLater[Any],
                            remedy: str = UnsettledLock.remedy) -> None:
    """Release ``lock``; raises ``LockNotOwned`` as its release does. Any other failure
    (Redis down, or its reply lost) is logged, not raised, and a lock that can
    ``settle()`` (``token``, ``fair``) waits on ``queue`` to be let go once Redis
    answers: a release whose reply was lost may never have run (Redis paused past the
    client's timeout), and the lock is then Redis's for nobody for its TTL, every buyer
    (or every reset) of the sale 503 busy. ``of``: whose lock, for the log."""
    settle = getattr(lock, "settle", None)  # the held handle's, before a cohort lets go
    try:
        lock.release()
    except LockNotOwned:
        raise
    except Exception as exc:  # a lock server down: once a minute, not once a buyer
        PER_REQUEST.log(logger, logging.ERROR, ("release", of, type(exc).__name__),
                        "releasing the %s lock of %s failed", of, sku, exc_info=True)
        if callable(settle):
            queue.add(UnsettledLock(settle, sku, of, remedy))


def drain_every(every_s: float, stop: threading.Event | None = None,
                also: Callable[[], Any] | None = None) -> threading.Thread:
    """Drain every queue each ``every_s`` in a daemon thread (a greenlet in a gevent
    worker: ``gunicorn_conf.post_worker_init``), so that a worker no buyer reaches any
    more settles its undos too; its purchases still drain first as they come. ``also``:
    called after them each time (``checkoutwatch``)."""
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            for queue in QUEUES:
                if queue:
                    try:
                        queue.drain()
                    except Exception:  # noqa: BLE001 - the next round tries again
                        logger.exception("draining the undo queue failed")
            if also is not None:
                try:
                    also()
                except Exception as exc:  # noqa: BLE001 - a backend down: the next round
                    PER_REQUEST.log(logger, logging.WARNING, ("every", type(exc).__name__),
                                    "the periodic look at the sales failed: %r", exc)

    thread = threading.Thread(target=loop, name="retry-later", daemon=True)
    thread.start()
    return thread


def last_chance(budget_s: float) -> int:
    """A worker exiting: try every queue's undos once more within ``budget_s``, and log
    each one still undone (they die with the process). Returns how many are left.

    **Failure timeline** it narrows: Redis is down when a purchase fails; its buyer's
    reservation waits here; the worker is restarted before Redis is back; the buyer hears
    409 ``already_purchased`` with no order until the next reset, and nobody was told.
    """
    until = time.monotonic() + budget_s
    left = 0
    for queue in QUEUES:
        for entry in queue.try_all(until):
            left += 1
            logger.error("exiting with an undo not done (its backend did not answer): %s; "
                         "%s", describe(entry),
                         getattr(entry, "remedy", "a reset of the sale clears it"))
    return left


def describe(entry: Any) -> str:
    """One undo, for the log: its kind and the purchase it belongs to."""
    fields = [f"{name}={getattr(entry, name)!r}" for name in ("sku", "user_id", "quantity")
              if hasattr(entry, name)]
    return f"{type(entry).__name__.lstrip('_')}({', '.join(fields)})"
