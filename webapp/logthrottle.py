"""A failure every request hits is logged once per kind a minute, not once a request.

A database that refuses every write (read-only, a table lock that times out) or a
backend that is down fails each purchase the same way, and each failure was logged,
with its traceback for a database refusal. A PostgreSQL fault audit ran 15 minutes of
faults against ``seckill serve``: the log grew to 42 MB and 20,596 tracebacks, 5,150
of them the same ``ReadOnlySqlTransaction`` from 40 s of a read-only database, and
the warnings an operator must settle (an order in doubt, units not given back) were
buried among them.

Now a kind of failure (the caller names it: where, and the exception's type) is logged
the first time with its traceback, then at most once every ``every_s`` with how many
were left out since the line before. A kind quiet for a whole interval starts over,
traceback included. The operator still learns each distinct failure and how often it
came. Warnings about one buyer's order or units are not throttled: each is one to settle.

The counts are per process: two gunicorn workers each log a kind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Kind:
    logged_at: float  # its last line
    seen_at: float  # its last occurrence
    left_out: int = 0  # since its last line


class Throttle:
    """Logs each kind of failure at most once every ``every_s`` (``clock``'s seconds)."""

    def __init__(self, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self._kinds: dict[Hashable, _Kind] = {}

    def admit(self, kind: Hashable) -> tuple[int, float, bool] | None:
        """None if ``kind`` was let through less than ``every_s`` ago (counted as left
        out). Else how many were left out since its last line, that line's age, and
        whether it is still going on (seen within ``every_s``): new, ``(0, 0.0, False)``."""
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen.logged_at < self.every_s:
            seen.left_out += 1
            seen.seen_at = now
            return None
        self._kinds[kind] = _Kind(logged_at=now, seen_at=now)
        if seen is None:
            return 0, 0.0, False
        return seen.left_out, now - seen.logged_at, now - seen.seen_at < self.every_s

    def log(self, logger: logging.Logger, level: int, kind: Hashable, msg: str, *args: Any,
            exc_info: BaseException | bool | None = None) -> None:
        """``logger.log(level, msg, *args, exc_info=exc_info)`` unless ``kind`` was
        logged less than ``every_s`` ago; its traceback only if ``kind`` is new, or has
        been quiet for ``every_s``."""
        admitted = self.admit(kind)
        if admitted is None:
            return
        left_out, since, going_on = admitted
        if left_out:
            msg += LEFT_OUT
            args = (*args, left_out, since)
        if going_on:
            exc_info = None  # still going on: its traceback is in an earlier line
        logger.log(level, msg, *args, exc_info=exc_info)

    def forget(self) -> None:
        """Every kind is new again (for tests)."""
        self._kinds.clear()


#: what a line let through says of the ones left out before it
LEFT_OUT = " (%d more like it left out since its last line, %.0f s ago)"

#: the shop's per-request failures (``errors.py``, the undos retried later)
PER_REQUEST = Throttle()


class RepeatFilter(logging.Filter):
    """A library's repeated line (the same level and message template) let through at
    most once every ``every_s``, the next one saying how many were left out; a template
    quiet for a whole interval starts over.

    For kazoo's reconnect loop: with ZooKeeper down, a worker logged "Connection dropped:
    socket connection error: Connection refused" about every 2 s for as long as it was
    down, each worker, the shop's own throttled lines buried among them (a deployment
    audit)."""

    def __init__(self, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._throttle = Throttle(every_s, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        admitted = self._throttle.admit((record.levelno, str(record.msg)))
        if admitted is None:
            return False
        left_out, since, _ = admitted
        if left_out:
            record.msg = f"{record.msg}{LEFT_OUT}"
            record.args = (*(record.args or ()), left_out, since)
        return True


class PrefixFilter(logging.Filter):
    """Lines that begin with one of ``prefixes`` (formatted by the library already, so
    each is a template of its own to ``RepeatFilter``): each prefix at most once every
    ``every_s``, cut to ``longest`` characters; other lines pass.

    For gunicorn's "Invalid request from ip=...: <the request line>", one WARNING per
    malformed request, each up to ~4 KB: 12,000 of them in 14 s rotated the whole kept
    log away (a security audit), the orders in doubt it keeps for the operator with it."""

    def __init__(self, prefixes: tuple[str, ...], every_s: float = 60.0,
                 longest: int = 300, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.prefixes, self.longest = prefixes, longest
        self._throttle = Throttle(every_s, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        prefix = next((p for p in self.prefixes if message.startswith(p)), None)
        if prefix is None:
            return True
        admitted = self._throttle.admit((record.levelno, prefix))
        if admitted is None:
            return False
        left_out, since, _ = admitted
        cut = message[:self.longest] + (" [...]" if len(message) > self.longest else "")
        record.msg, record.args = cut, ()  # no args: not formatted (a "%" stays one)
        if left_out:
            record.msg = cut.replace("%", "%%") + LEFT_OUT
            record.args = (left_out, since)
        return True


#: gunicorn's line per malformed request
GUNICORN_BAD_REQUESTS = PrefixFilter(("Invalid request from ip=",))


#: kazoo's own lines, each kind at most once a minute
KAZOO_REPEATS = RepeatFilter()


def quiet_kazoo() -> None:
    """kazoo's reconnect loop logs through the ``kazoo.client`` logger: its repeats go
    through ``KAZOO_REPEATS`` (installed once per process: the shop's workers, the
    bench's)."""
    kazoo_log = logging.getLogger("kazoo.client")
    if KAZOO_REPEATS not in kazoo_log.filters:
        kazoo_log.addFilter(KAZOO_REPEATS)
