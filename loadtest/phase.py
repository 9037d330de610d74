"""One showdown phase: reset the sale, run Locust headless in a subprocess, audit.

Locust runs as ``python -m locust`` because importing it monkey-patches the importing
process with gevent; the showdown stays a plain Python process that only reads what
Locust leaves behind (``--csv`` files and the arrival log) and asks the shop's audit
endpoint what really happened.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcore.lifeline import tied_to_parent

from . import arrivals, commandstats, locust_csv, sustained
from .compare import NOOP_MODES, StrategyResult
from .multihost_locust import stop_locust
from .shop import ShopClient
from .verdict import NOOP, PURCHASE_NAME

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LOCUSTFILE, SHAPES = HERE / "locustfile.py", HERE / "shapes.py"
#: the baselines: Flask and gunicorn doing nothing (``/healthz`` pings Redis and the DB);
#: POSTed like a purchase in mode ``noop``, a bare GET in mode ``noop-get``
NOOP_PATH = "/api/noop"


@dataclass(frozen=True)
class Plan:
    users: int = 1000
    stock: int = 100
    work_ms: int = 20
    mode: str = "flash"          # flash | sustained | noop | noop-get
    duration: int = 10           # sustained/noop(-get): seconds of load
    cap_s: int = 35              # flash: hard cap (keeps `make demo` under 10 minutes)
    sku: str = "sku-1"
    busy_retries: int = 1
    #: how long the sale must stay still after a run cut short before we audit or reset:
    #: Locust quitting does not stop requests the shop already accepted, and one may wait
    #: for a lock up to the shop's LOCK_TIMEOUT_S and then sell. Audited (or reset for the
    #: next strategy) too early, its order lands in the wrong run; a stale naive write once
    #: made the next strategy look inconsistent that way.
    drain_s: float = 11.0


def locust_command(plan: Plan, host: str, prefix: Path, arrivals_log: Path) -> list[str]:
    files = f"{LOCUSTFILE},{SHAPES}" if plan.mode == "flash" else str(LOCUSTFILE)
    run_time = plan.cap_s if plan.mode == "flash" else plan.duration
    return [sys.executable, "-m", "locust", "-f", files, "--headless", "--host", host,
            "-u", str(plan.users), "-r", str(plan.users), "-t", f"{run_time}s",
            "--csv", str(prefix), "--csv-full-history", "--only-summary",
            "--seckill-mode", plan.mode, "--seckill-sku", plan.sku,
            "--seckill-stock", str(plan.stock if plan.mode == "flash" else 0),
            "--seckill-busy-retries", str(plan.busy_retries),
            "--seckill-arrivals", str(arrivals_log), "--seckill-noop-path", NOOP_PATH]


def run_locust(command: list[str], log_path: Path, timeout: float) -> int:
    """Run Locust to completion (killed by pid past ``timeout``, or when we are
    interrupted); returns its exit code.

    Exit code 1 only means some requests failed, which the audit judges; not an error.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("w") as log:
        proc = subprocess.Popen(tied_to_parent(command), stdout=log, stderr=subprocess.STDOUT,
                                env=env, stdin=subprocess.DEVNULL)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("locust pid %s overran %.0fs; killing it", proc.pid, timeout)
            proc.kill()
            proc.wait(timeout=10)
            raise
        except BaseException:  # Ctrl-C, SIGTERM: Locust is ours to stop, not left writing
            stop_locust(proc)  # its CSVs into a scratch dir the caller is removing
            raise


def run_phase(shop: ShopClient, redis_clients: list[Any], name: str, safe: bool,
              plan: Plan, raw_dir: Path, round_no: int = 0) -> StrategyResult:
    """Run ``plan`` against strategy ``name`` (for ``noop``/``noop-get``: a baseline),
    as round ``round_no`` of a sustained run with rounds (0: no rounds)."""
    result = StrategyResult(name, safe, mode=plan.mode, users=plan.users, stock=plan.stock,
                            round_no=round_no)
    prefix, log = raw_dir / result.label, raw_dir / f"{result.label}_arrivals.jsonl"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    if plan.mode not in NOOP_MODES:
        shop.reset_sale(plan.sku, plan.stock, name, plan.work_ms)
    before = commandstats.total_calls(redis_clients)
    limit = (plan.cap_s if plan.mode == "flash" else plan.duration) + 90
    ran_from = time.monotonic()
    run_locust(locust_command(plan, shop.url, prefix, log), raw_dir / f"{result.label}.log",
               limit)
    cut_short = plan.mode != "flash" or time.monotonic() - ran_from >= plan.cap_s
    after = commandstats.total_calls(redis_clients)
    _read_locust(result, prefix, plan)
    tried = arrivals.read_arrivals(log)
    result.outcomes = arrivals.outcome_counts(tried)
    if plan.mode not in NOOP_MODES:
        _read_audit(result, shop.settled_audit(plan.sku, plan.drain_s if cut_short else 1.5), tried)
        result.redis_per_purchase = commandstats.per_attempt(before, after, len(tried))
    if plan.mode == "flash":
        result.sell_out_s = arrivals.time_to_sell_out(tried, plan.stock)
        result.fairness = arrivals.fairness(tried, plan.stock)
    elif plan.mode == "sustained":
        result.purchases_per_s = sustained.orders_per_s(tried)
    elif plan.mode == "noop":  # counted exactly as purchases are
        result.purchases_per_s = sustained.orders_per_s(tried, NOOP)
    result.seconds = time.monotonic() - started
    return result


def _read_locust(result: StrategyResult, prefix: Path, plan: Plan) -> None:
    stats = locust_csv.read_stats(prefix)
    total = stats.get(locust_csv.AGGREGATED)
    if total is None or total.requests == 0:
        raise RuntimeError(f"Locust made no requests; see {prefix}.log")
    timed = total if plan.mode in NOOP_MODES else stats.get(PURCHASE_NAME, total)
    result.rps, result.failures = total.rps, total.failures
    result.p50, result.p95, result.p99 = timed.p50, timed.p95, timed.p99
    history = locust_csv.read_history(prefix)
    result.throughput = locust_csv.throughput(history)
    if plan.mode != "flash":  # a sustained phase's steady window, as its purchases/s:
        # Locust's whole-run average counts the ramp (and its CSV misses the last
        # second), so req/s came out below purchases/s in the same row
        result.rps = sustained.requests_per_s(history, total.rps)


def _read_audit(result: StrategyResult, audit: dict[str, Any],
                tried: list[arrivals.Arrival]) -> None:
    told_ok = sum(1 for a in tried if a.outcome == "order")
    result.sold = int(audit.get("units_sold", 0))
    result.oversold = int(audit.get("oversold", 0))
    result.duplicates = int(audit.get("duplicate_buyers", 0))
    result.consistent = bool(audit.get("consistent", False))
    result.lost = max(told_ok - int(audit.get("orders", 0)), 0)
    result.unconfirmed = max(int(audit.get("orders", 0)) - told_ok, 0)
