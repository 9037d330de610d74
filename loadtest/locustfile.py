"""Flash-sale buyers: a true spike of browse-then-buy, wrong answers flagged as failures.

Against any deployment (plain Locust; every ``--seckill-*`` option also reads an env var)::

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8000 --headless \\
           -u 1000 -r 1000 -t 30s --seckill-stock 100 --seckill-arrivals arrivals.jsonl

Distributed: the same file on a ``--master`` and ``--worker`` processes; pass
``--seckill-start-at <epoch seconds>`` so buyers on every worker fire at the same instant.
Add ``loadtest/shapes.py`` to ``-f`` to stop as soon as the sale is over.

Why a barrier: Locust warns above 100 spawns/s, and a ramp is not a spike. Every buyer
waits in ``on_start`` until spawning completes (or the wall-clock start instant), then
all of them browse and buy together, which is what makes unsafe locks oversell.
Modes: ``flash`` (one buyer, one purchase, retry on 503 busy), ``sustained`` (each
iteration is a new buyer id buying at once, no browsing, for purchases/s), ``noop``
(the sustained loop with ``POST /api/noop`` instead of the purchase: the same body,
parse, check and arrival log, so a ratio of the two compares the shop's work only) and
``noop-get`` (a bare ``GET /api/noop``, the old baseline: no client-side work at all).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from gevent import GreenletExit
from locust import FastHttpUser, events, run_single_user, task
from locust.env import Environment
from locust.runners import WorkerRunner

from loadtest import arrivals, inflight, locust_csv, verdict
from loadtest.locust_options import add_seckill_options
from loadtest.spike import SpikeBarrier

logger = logging.getLogger(__name__)

barrier = SpikeBarrier()
_log: list[arrivals.Arrival] = []
_tally = verdict.OrderTally(None)


events.init_command_line_parser.add_listener(add_seckill_options)


@events.test_start.add_listener
def _arm(environment: Environment, **_: Any) -> None:
    global _tally
    options = environment.parsed_options
    stock = getattr(options, "seckill_stock", 0)
    _tally = verdict.OrderTally(stock or None)
    _log.clear()
    barrier.arm(getattr(options, "seckill_start_at", 0) or None)


events.spawning_complete.add_listener(lambda user_count, **_: barrier.release())


@events.test_stop.add_listener
def _save_log(environment: Environment, **_: Any) -> None:
    path = getattr(environment.parsed_options, "seckill_arrivals", "")
    if path:
        arrivals.write_arrivals(path, _log)
        logger.info("%d purchase attempts logged to %s", len(_log), path)
    _log.clear()


_environment: list[Environment] = []  # the run's, for ``quit`` (which is not given it)


@events.init.add_listener
def _keep_environment(environment: Environment, **_: Any) -> None:
    _environment[:] = [environment]


@events.quit.add_listener
def _save_final_stats(exit_code: int, **_: Any) -> None:
    if not _environment:
        return
    environment = _environment[0]
    path = getattr(environment.parsed_options, "seckill_final_stats", "")
    if path and not isinstance(environment.runner, WorkerRunner):  # the master's: the
        # whole run's (a worker's would write its own part over it)
        locust_csv.write_final(path, environment.stats)


class Buyer(FastHttpUser):
    network_timeout = verdict.ANSWER_TIMEOUT_S
    connection_timeout = verdict.ANSWER_TIMEOUT_S

    def __init__(self, environment: Environment) -> None:
        # ``seckill serve`` prints its URL with a trailing slash: pasted into ``--host``,
        # every request went to ``//api/...``, which the client refuses (a traceback per
        # try, thousands a second, and no request sent: a Locust audit)
        if self.host:
            self.host = self.host.rstrip("/")
        super().__init__(environment)

    def wait_time(self) -> float:
        # a flash-sale buyer buys once, then idles until the run ends
        return 3600.0 if self.finished else 0.0

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.sku: str = getattr(options, "seckill_sku", "sku-1")
        self.mode: str = getattr(options, "seckill_mode", "flash")
        self.retries: int = max(0, getattr(options, "seckill_busy_retries", 1))
        self.noop_path: str = getattr(options, "seckill_noop_path", "/api/noop")
        self.user_id = _new_buyer_id()
        self.finished = False
        if self.mode == "flash":
            barrier.wait()

    @task
    def browse_then_buy(self) -> None:
        if self.mode == "noop-get":
            self.client.get(self.noop_path)
            return
        if self.mode == "flash":  # sustained: a stream of buyers who only buy
            shown = self.browse()
            if shown is not None and shown <= 0:
                self.finished = True  # the page says sold out: a real buyer doesn't click buy
                return
        for attempt in range(1, self.retries + 2):
            retry_after = self.purchase(attempt)
            if retry_after is None or attempt > self.retries:
                break
            time.sleep(retry_after)  # gevent-patched: only this buyer waits
        if self.mode == "flash":
            self.finished = True
        else:
            self.user_id = _new_buyer_id()

    def browse(self) -> int | None:
        """GET the product page; returns the stock it shows (None if it didn't load)."""
        with inflight.request(), self.client.get(
                f"/api/products/{self.sku}", name=verdict.BROWSE_NAME,
                catch_response=True) as resp:
            try:
                stock = resp.json()["stock"] if resp.status_code == 200 else None
            except Exception:  # noqa: BLE001 - a broken page is a failure, not a crash
                resp.failure("product page is not the documented JSON")
                return None
        return stock if isinstance(stock, int) else None

    def purchase(self, attempt: int) -> float | None:
        """One attempt; returns seconds to wait before retrying, or None when done.

        In ``noop`` mode the very same code POSTs to the no-op endpoint instead."""
        sent = time.time()
        if self.mode == "noop":
            path, name, judge = self.noop_path, verdict.NOOP_NAME, verdict.judge_noop
        else:
            path, name = f"/api/products/{self.sku}/purchase", verdict.PURCHASE_NAME
            judge = verdict.judge_purchase
        try:
            with inflight.request(), self.client.post(
                    path, name=name, json={"user_id": self.user_id, "quantity": 1},
                    catch_response=True) as resp:
                try:
                    body = resp.json()
                except Exception:  # noqa: BLE001 - any unparsable body is a malformed answer
                    body = None
                judged = judge(resp.status_code or 0, body, self.user_id)
                if judged.outcome == verdict.ORDER and judged.failure is None:
                    judged = _tally.record(int(body["quantity"]))
                if judged.failure:
                    resp.failure(judged.failure)
                else:
                    resp.success()
        except GreenletExit:  # the run stopped (its cap) while this one waited: logged,
            # or the showdown never knew it was sent (``verdict.CUT_OFF``)
            _log.append(arrivals.Arrival(self.user_id, attempt, sent, time.time(), 0,
                                         verdict.CUT_OFF))
            raise
        _log.append(arrivals.Arrival(self.user_id, attempt, sent, time.time(),
                                     resp.status_code or 0, judged.outcome))
        if judged.outcome != verdict.BUSY:
            return None
        header = resp.headers.get("Retry-After") if resp.headers else None
        return verdict.retry_delay(header)


def _new_buyer_id() -> str:
    return f"buyer-{os.getpid()}-{uuid.uuid4().hex[:12]}"


if __name__ == "__main__":
    # python loadtest/locustfile.py --host http://127.0.0.1:8000  (one buyer, in a debugger)
    barrier.enabled = False
    run_single_user(Buyer)
