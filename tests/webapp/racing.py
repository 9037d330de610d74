"""A waiter's event for races at the edge of a timeout, shared by the cohort and
combining tests."""

from __future__ import annotations

import threading


class WaitTimesOutAtTheHandOver:
    """An event whose timed wait runs out at the very moment it is set (a lock or a lead
    handed over): the wait says "timed out", yet the waiter is no longer queued. An
    untimed wait returns True once set."""

    def __init__(self) -> None:
        self.real = threading.Event()

    def set(self) -> None:
        self.real.set()

    def wait(self, timeout: float | None = None) -> bool:
        self.real.wait(5)
        return timeout is None
