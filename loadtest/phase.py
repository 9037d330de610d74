"""One showdown phase: reset the sale, run Locust headless in a subprocess, audit.

Locust runs as ``python -m locust`` because importing it monkey-patches the importing
process with gevent; the showdown stays a plain Python process that only reads what
Locust leaves behind (``--csv`` files and the arrival log) and asks the shop's audit
endpoint what really happened. What it reads must be whole: Locust rewrites its stats
CSV every second but writes the arrival log only when the run stops, so a Locust killed
mid-phase (or ending with an error of its own) leaves stats and no log, which read as
"nobody was told anything, nothing was lost". Such a phase is ``PhaseBroken``: no verdict.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
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
from .shop import ShopClient, ShopError
from .verdict import CUT_OFF, NOOP, NOOP_NAME, PURCHASE_NAME

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LOCUSTFILE, SHAPES = HERE / "locustfile.py", HERE / "shapes.py"
#: the baselines: Flask and gunicorn doing nothing (``/healthz`` pings Redis and the DB);
#: POSTed like a purchase in mode ``noop``, a bare GET in mode ``noop-get``
NOOP_PATH = "/api/noop"
#: the exit codes of a Locust run that finished: 0, every request succeeded; 1
#: (``--exit-code-on-error``'s default), some failed or a buyer's task raised, which the
#: audit and the arrival log judge. Anything else (2: a listener or greenlet raised; a
#: negative code: killed by a signal) is a run that did not finish as planned.
LOCUST_FINISHED = (0, 1)


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


class PhaseBroken(RuntimeError):
    """A phase that ran but left no evidence to judge: Locust did not finish, made no
    requests, or its arrival log is incomplete. The message is the whole story (the
    showdown prints it in one line, without a traceback)."""


def locust_command(plan: Plan, host: str, prefix: Path, arrivals_log: Path) -> list[str]:
    files = f"{LOCUSTFILE},{SHAPES}" if plan.mode == "flash" else str(LOCUSTFILE)
    run_time = plan.cap_s if plan.mode == "flash" else plan.duration
    return [sys.executable, "-m", "locust", "-f", files, "--headless", "--host", host,
            "-u", str(plan.users), "-r", str(plan.users), "-t", f"{run_time}s",
            "--csv", str(prefix), "--csv-full-history", "--only-summary",
            "--seckill-mode", plan.mode, "--seckill-sku", plan.sku,
            "--seckill-stock", str(plan.stock if plan.mode == "flash" else 0),
            "--seckill-busy-retries", str(plan.busy_retries),
            "--seckill-arrivals", str(arrivals_log), "--seckill-noop-path", NOOP_PATH,
            "--seckill-final-stats", str(locust_csv.final_path(prefix))]


def run_locust(command: list[str], log_path: Path, timeout: float) -> int:
    """Run Locust to completion (killed by pid past ``timeout``, or when we are
    interrupted); returns its exit code (negative: killed by that signal).

    Exit code 1 only means some requests failed, which the audit judges; the caller
    takes any code outside ``LOCUST_FINISHED`` for a broken run.
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
    locust_csv.final_path(prefix).unlink(missing_ok=True)  # a run before into this folder
    started = time.monotonic()
    if plan.mode not in NOOP_MODES:
        shop.reset_sale(plan.sku, plan.stock, name, plan.work_ms)
    before = commandstats.total_calls(redis_clients)
    limit = (plan.cap_s if plan.mode == "flash" else plan.duration) + 90
    ran_from = time.monotonic()
    locust_log = raw_dir / f"{result.label}.log"
    exit_code = run_locust(locust_command(plan, shop.url, prefix, log), locust_log, limit)
    if exit_code not in LOCUST_FINISHED:
        _broken_run(shop, plan, f"Locust {_ended(exit_code)} (see {locust_log})")
    cut_short = plan.mode != "flash" or time.monotonic() - ran_from >= plan.cap_s
    after = commandstats.total_calls(redis_clients)
    tried = arrivals.read_arrivals(log)
    result.outcomes = arrivals.outcome_counts(tried)
    in_flight = result.outcomes.get(CUT_OFF, 0)  # a buyer has one request at a time
    stats = _read_locust(result, prefix, plan, in_flight)
    # Locust's stats count a purchase in the same step as the buyer logs it (no switch
    # between them; its CSV may lag a second behind, its final stats do not): fewer
    # lines than its count means the log lost some, and an order told 201 among them
    # would not be seen lost
    logged = _LOGGED_AS.get(plan.mode)
    counted = stats[logged].requests if logged in stats else 0
    # the attempts cut off at the run's end are lines Locust never counted: only the
    # answered ones stand for its count (with them, 5 cut-off lines hid 3 lost; a review)
    answered = len(tried) - in_flight
    if answered < counted:
        _broken_run(shop, plan, f"the arrival log has {answered} of the {counted} "
                                f"purchase attempts Locust counted: it is incomplete "
                                f"(see {locust_log})")
    late: set[str] = set()  # buyers cut off at the cap whom the shop served after it
    if plan.mode not in NOOP_MODES:
        audit = shop.settled_audit(plan.sku, plan.drain_s if cut_short else 1.5)
        late = _read_audit(result, audit, tried, shop.buyers(plan.sku))
        result.redis_per_purchase = commandstats.per_attempt(before, after, len(tried))
    if plan.mode == "flash":
        result.sell_out_s = arrivals.time_to_sell_out(tried, plan.stock)
        result.fairness = arrivals.fairness(tried, plan.stock, late)
    elif plan.mode == "sustained":
        result.purchases_per_s = sustained.orders_per_s(tried)
    elif plan.mode == "noop":  # counted exactly as purchases are
        result.purchases_per_s = sustained.orders_per_s(tried, NOOP)
    result.seconds = time.monotonic() - started
    return result


#: the Locust stats row whose requests each add a line to the arrival log, by mode (the
#: bare GET baseline logs nothing)
_LOGGED_AS = {"flash": PURCHASE_NAME, "sustained": PURCHASE_NAME, "noop": NOOP_NAME}


def _ended(exit_code: int) -> str:
    """How a Locust run that did not finish ended, for a phase's error."""
    if exit_code < 0:
        try:
            return f"was killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"was killed by signal {-exit_code}"
    if exit_code == 2:
        return "exited with code 2 (a listener or greenlet raised: its log says which)"
    return f"exited with code {exit_code}"


def _broken_run(shop: ShopClient, plan: Plan, why: str) -> None:
    """Raise ``why``: the phase's evidence is incomplete, so it has no verdict (its CSVs
    may be a second or more stale, and a buyer told 201 may be missing from its arrival
    log: a lost order that nothing would show). First the sale is left to settle, so
    that requests the shop had accepted land before the next phase resets it."""
    if plan.mode not in NOOP_MODES:
        with contextlib.suppress(ShopError, OSError, ValueError):  # the error says enough
            shop.settled_audit(plan.sku, plan.drain_s)
    raise PhaseBroken(f"{why}; the phase has no verdict")


def _read_locust(result: StrategyResult, prefix: Path, plan: Plan,
                 in_flight: int = 0) -> dict[str, locust_csv.RequestStats]:
    """Speed and latency into ``result``; returns the rows read, by request name.
    ``in_flight``: purchases the arrival log has as cut off when the run stopped."""
    stats = locust_csv.read_stats(prefix)
    total = stats.get(locust_csv.AGGREGATED)
    if total is None or total.requests == 0:
        # Locust counts a request when it is answered: a sustained run of 2 s with 3 s
        # sections said "Locust made no requests" of one sent and still waiting
        why = "Locust made no requests" if not in_flight else (
            f"no request finished within the run: {in_flight} still in flight")
        if plan.mode != "flash" and plan.work_ms >= 1000 * plan.duration:
            why += f" (work_ms {plan.work_ms} >= the run's {plan.duration} s)"
        raise PhaseBroken(f"{why}; see {prefix}.log")
    timed = total if plan.mode in NOOP_MODES else stats.get(PURCHASE_NAME, total)
    result.rps, result.failures = total.rps, total.failures
    result.p50, result.p95, result.p99 = timed.p50, timed.p95, timed.p99
    history = locust_csv.read_history(prefix)
    result.throughput = locust_csv.throughput(history)
    if plan.mode != "flash":  # a sustained phase's steady window, as its purchases/s:
        # Locust's whole-run average counts the ramp, so req/s came out below
        # purchases/s in the same row
        result.rps = sustained.requests_per_s(history, total.rps)
    return stats


def _read_audit(result: StrategyResult, audit: dict[str, Any],
                tried: list[arrivals.Arrival], ordered: set[str]) -> set[str]:
    """The audit's figures into ``result``, and the orders lost and unconfirmed, buyer
    by buyer: ``ordered`` are the buyers the shop has an order for (read after the
    audit settled). *Lost*: told 201, no order; *unconfirmed*: an order, never told.
    Returns the unconfirmed buyers whose attempt was cut off at the cap: they got a
    unit, made after the phase stopped listening (``served_after_cap``).

    They were counts, told 201 minus orders and the other way round, and a lost order
    and one whose answer was lost (a 500, a timeout) cancelled out: "lost 0", verdict
    ok (a showdown audit)."""
    told = arrivals.winners(tried)
    result.sold = int(audit.get("units_sold", 0))
    result.oversold = int(audit.get("oversold", 0))
    result.duplicates = int(audit.get("duplicate_buyers", 0))
    result.consistent = bool(audit.get("consistent", False))
    orders = int(audit.get("orders", 0))
    if not result.duplicates and len(ordered) != orders:  # one order per buyer
        raise PhaseBroken(f"the shop lists {len(ordered)} buyers with an order and its "
                          f"audit counts {orders} orders: the sale changed while it was "
                          "read, so the phase has no verdict")
    result.lost = len(told - ordered)
    result.unconfirmed = len(ordered - told)
    late = (ordered - told) & arrivals.cut_off(tried)
    result.served_after_cap = len(late)
    return late
