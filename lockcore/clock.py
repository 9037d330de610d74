"""Time as a dependency, so timeout tests need not sleep.

redis-py's tests monkeypatch ``mod_time``; we pass a clock in instead. ``SystemClock``
is the real one; ``tests/`` has a ``FakeClock`` whose ``sleep`` advances ``monotonic``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary start; never goes backwards."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch (only the GETSET lock trusts this)."""

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""


class SystemClock:
    """The real clock. ``time.sleep`` is gevent-aware once gevent has patched it."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
