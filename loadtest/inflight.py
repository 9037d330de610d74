"""Requests sent and not yet answered, for the flash-sale shape's "the sale is over".

The shape (``shapes.py``) ends a run once no request has been answered for its tail
(2 s). Locust's stats count a request when its answer comes, so a buyer waiting for a
lock held for seconds (``--work-ms 3000``, or lock servers that do not answer until the
shop's 10 s lock timeout) did not count as anything moving.

**Failure timeline** it prevents::

    showdown:  token, 60 buyers, 20 units, work_ms 3000
    shop:      the first section holds the lock 3 s; the 59 others wait for it
    shape:     2 s with no answer: "the sale is over", the buyers are stopped
    showdown:  token "sold 1", verdict ok (and the waiting purchases still landed,
               after the audit)

So the buyers count what they have in flight here, and the shape waits while any is.
In distributed mode each worker adds its count to its reports (every 3 s) and the
master keeps the latest of each: ``total`` is this process's plus theirs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from locust import events

#: requests this process has sent and not yet had answered (greenlets: no lock needed)
_here = 0
#: a distributed master's view: each worker's count, as of its latest report
_workers: dict[str, int] = {}
REPORT_KEY = "seckill_inflight"


@contextlib.contextmanager
def request() -> Iterator[None]:
    """Around one request: counted from sending to its answer (or its error)."""
    global _here
    _here += 1
    try:
        yield
    finally:
        _here -= 1


def total() -> int:
    """Requests in flight in this process and, on a master, in its workers."""
    return _here + sum(_workers.values())


@events.report_to_master.add_listener
def _report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    data[REPORT_KEY] = _here


@events.worker_report.add_listener
def _worker_said(client_id: str, data: dict[str, Any], **_: Any) -> None:
    _workers[client_id] = int(data.get(REPORT_KEY, 0))
