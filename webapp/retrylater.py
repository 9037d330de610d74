"""Clean-up that a backend was down for, tried again by this process's later purchases.

A failed purchase must undo what it did (drop its buyer's reservation, give its units
back, settle an order write whose outcome is unknown). When Redis or the database is
down for that too, the undo waits here, and each purchase of this worker first drains
what waits, oldest first, at most once a ``every_s``: while the backend hangs, a
purchase does not wait a timeout for someone else's undo before waiting one for itself.
The drain stops at the first undo that fails again (the backend is still down).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


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

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, entry: T) -> None:
        self.waiting.append(entry)

    def drain(self) -> None:
        if time.monotonic() < self.next_drain:
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
