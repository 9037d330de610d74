"""FlashSaleShape: everyone at once, then stop as soon as the sale has gone quiet.

A flash sale is over in seconds, but ``--run-time`` has to be set for the slowest lock,
so a fixed run time wastes most of a showdown waiting. This shape spawns ``-u`` users
at ``-r`` per second (the spike barrier in the locustfile makes them fire together) and
ends the test once every buyer has browsed (each does once; one who sees "sold out"
does not buy) and no request at all has been answered for ``SECKILL_TAIL`` seconds
while none was waiting for its answer (default 2; purchases, retries after 503 and a
purchase waiting for a lock keep it alive: ``inflight.py``).
``-t`` stays a hard cap. It reads only the master's aggregated stats, so it also works
in distributed mode (set the tail above the 3 s worker report interval there).

Use it by adding it to the locustfile list::

    locust -f loadtest/locustfile.py,loadtest/shapes.py -u 1000 -r 1000 -t 60s ...
"""

from __future__ import annotations

import logging
import os
import time

from locust import LoadTestShape

from loadtest import inflight
from loadtest.verdict import BROWSE_NAME

logger = logging.getLogger(__name__)


class FlashSaleShape(LoadTestShape):
    use_common_options = True  # take -u, -r and -t from the command line

    def __init__(self) -> None:
        super().__init__()
        self.tail = float(os.environ.get("SECKILL_TAIL", "2"))
        self._last_count = -1
        self._quiet_since = time.monotonic()

    def reset_time(self) -> None:
        """A new run (Locust calls it at each start): its quiet is counted afresh. The
        web UI's second swarm ended at once, "every buyer browsed and nothing moved", on
        the first run's counts, which Locust clears after the first tick (a Locust audit)."""
        super().reset_time()
        self._last_count = -1
        self._quiet_since = time.monotonic()

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options if self.runner else None
        users = int(getattr(options, "num_users", None) or 1)
        rate = float(getattr(options, "spawn_rate", None) or users)
        run_time = getattr(options, "run_time", None)
        if run_time and self.get_run_time() > run_time:
            logger.info("flash sale: run time of %ss reached", run_time)
            return None
        if self._sale_is_over(users):
            logger.info("flash sale: every buyer browsed and nothing moved for %.1fs", self.tail)
            return None
        return users, rate

    def _sale_is_over(self, users: int) -> bool:
        assert self.runner is not None
        stats = self.runner.stats
        browsed = stats.get(BROWSE_NAME, "GET").num_requests  # each buyer browses once
        count = stats.total.num_requests
        now = time.monotonic()
        if count != self._last_count or inflight.total() > 0:
            self._last_count, self._quiet_since = count, now
            return False
        return browsed >= users and now - self._quiet_since >= self.tail
