"""Every strategy against the same 1000-buyer spike: one comparison table and a report.

For each strategy the showdown resets the sale, runs Locust headless as a subprocess
(the spike barrier makes all buyers fire at once), and asks the shop's audit endpoint
what really happened. By default it serves the app itself (``webapp.serve.ServedApp``:
embedded Redis and SQLite unless ``REDIS_URL``/``DATABASE_URL``); ``--url`` points it at
a running deployment instead. It exits 1 when a strategy marked safe oversold, lost an
order or left the sale inconsistent: the unsafe ones are *expected* to fail, which is
the lesson.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import urllib.parse
from pathlib import Path

from webapp.cli import stopping

from .cliargs import (
    at_least,
    comma_names,
    folders_made_for_a_check,
    seconds,
    seconds_up_to,
    unwritable_file,
    write_results,
)
from .compare import (
    NOOP_MODES,
    NOTHING_SOLD,
    StrategyResult,
    failed,
    format_rounds,
    format_table,
    phase_label,
    table_notes,
)
from .phase import PhaseBroken, Plan, run_phase
from .serving import (
    Target,
    malformed_redis_urls,
    serve_target,
    strategy_names,
    strategy_safety,
)
from .shop import ShopError, ShopUnreachable, unsendable_token
from .verdict import ANSWER_TIMEOUT_S

logger = logging.getLogger(__name__)

BASELINE_POST, BASELINE_GET = "no-op baseline", "no-op GET (old)"
BASELINE_POST_END = "no-op baseline (end)"
# what the shop's admin reset takes (webapp.admin, which imports Flask: slow to load
# for a --help); beyond them every phase would fail with the same 400
SHOP_MAX_STOCK, SHOP_MAX_WORK_MS = 1_000_000, 10_000
#: a flash sale's units, and a sustained phase's: more than its buyers can buy
FLASH_STOCK, SUSTAINED_STOCK = 100, SHOP_MAX_STOCK
MAX_WORKERS = 64
#: buyers: one Locust process runs them (the multi-host run: one per host), a connection
#: each; 10**8 began a phase that could only exhaust the file descriptors and memory (a
#: CLI audit)
MAX_USERS = 10_000
#: the served shop's log in ``--report DIR/raw/`` (gunicorn's and the shop's lines)
SHOP_LOG = "shop.log"
#: a lock timeout the buyers outwait: past it they gave up on purchases the shop then
#: made (a showdown audit: --lock-timeout 30, 51 of 60 with no answer, "ok")
MAX_LOCK_TIMEOUT_S = 25.0
# a 1 s Locust run ends before its once-a-second CSV is written: every phase "made no
# requests" (it had made 1,639); a day is far past what a phase is for
MIN_SUSTAINED_S, MAX_SUSTAINED_S = 2, 86_400
#: sustained rounds: the phases are planned up front, and 10**8 rounds served the shop,
#: then filled memory (MemoryError tracebacks); 100 rounds of one strategy last hours
MAX_ROUNDS = 100


class ShowdownInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) between or during phases, carrying the phases that finished:
    the run reports them rather than nothing. A showdown interrupted ten minutes into a
    sustained run printed one line, and the finished phases' figures were lost with the
    scratch folder. A KeyboardInterrupt still, so any code that stops on Ctrl-C stops."""

    def __init__(self, results: list[StrategyResult], total: int) -> None:
        super().__init__()
        self.results, self.total = results, total

    @property
    def note(self) -> str:
        return (f"interrupted after {len(self.results)} of {self.total} phases: "
                "the table has only those")


def strategy_list(text: str) -> list[str]:
    """The names, each once (``comma_names``), checked up front: a typo should be a
    usage error, not a failed phase."""
    known = strategy_names()
    names = comma_names(text)
    if not names:  # '' or ',,': not "every strategy"
        raise argparse.ArgumentTypeError(
            f"no strategy named; leave --strategies out for all, or choose from "
            f"{', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def _shop_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if "@" in text:
        # urllib took "user:password@host" for the host name ("Name or service not
        # known", the password printed; a showdown audit), and the admin calls send
        # their own Authorization header: no room for a proxy's Basic one. Asked first,
        # and never quoting the URL (a password with "/" or "?" in it splits it early)
        host = text.rpartition("@")[2]
        raise argparse.ArgumentTypeError(
            "a user or password in the URL is not supported (the admin calls send the "
            "token in the Authorization header): give the shop's own address, like "
            f"{parts.scheme or 'http'}://{host}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r} "
                                         "(like http://127.0.0.1:8000)")
    if parts.query or parts.fragment:  # the paths are appended: "?x=1/api/..." broke
        raise argparse.ArgumentTypeError(f"give the shop's root URL, without a query or "
                                         f"fragment: {text!r} (like http://127.0.0.1:8000)")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--users", type=at_least(1, MAX_USERS), default=1000,
                        help=f"buyers (default 1000, at most {MAX_USERS:,}: one Locust "
                             "process drives them)")
    parser.add_argument("--stock", type=at_least(1, SHOP_MAX_STOCK), default=None,
                        help=f"units on sale (default {FLASH_STOCK}; not with --sustained, "
                             f"whose phases have {SUSTAINED_STOCK:,})")
    parser.add_argument("--strategies", type=strategy_list, default=None,
                        help="comma-separated, each run once however often named "
                             "(default: every strategy the shop offers)")
    parser.add_argument("--report", metavar="DIR", help="write DIR/index.html and raw data")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--work-ms", type=at_least(0, SHOP_MAX_WORK_MS), default=None,
                        help="simulated work inside the critical section (default 20; "
                             "0 with --sustained: 20 ms would cap a lock at 50/s)")
    parser.add_argument("--sustained", action="store_true",
                        help="large stock, fresh buyers for --duration: purchases/s")
    parser.add_argument("--duration", type=at_least(MIN_SUSTAINED_S, MAX_SUSTAINED_S),
                        default=None, help=f"sustained seconds (default 10, at least "
                                         f"{MIN_SUSTAINED_S})")
    parser.add_argument("--rounds", type=at_least(1, MAX_ROUNDS), default=1,
                        help="sustained: run the strategies this many times, the POST no-op "
                             "again after each round; each round is a share of the no-op "
                             "just before and after it, and the median is printed "
                             f"(at most {MAX_ROUNDS})")
    parser.add_argument("--paired", action="store_true",
                        help="sustained: the POST no-op after every strategy phase, not "
                             "only after each round, so each phase is a share of the "
                             "baselines right beside it (a machine whose speed drifts "
                             "within minutes moves both sides of its ratio)")
    parser.add_argument("--lock-timeout", type=seconds_up_to(MAX_LOCK_TIMEOUT_S), default=None,
                        help="seconds a buyer waits for the lock before 503 busy "
                             "(sets the served shop's LOCK_TIMEOUT_S; its default is 10; "
                             f"at most {MAX_LOCK_TIMEOUT_S:g}: the buyers wait "
                             f"{ANSWER_TIMEOUT_S:g} s for an answer)")
    parser.add_argument("--workers", type=at_least(1, MAX_WORKERS), default=None,
                        help="gunicorn workers of the shop it serves (default 2)")
    parser.add_argument("--url", type=_shop_url, help="a running shop instead of serving one")
    parser.add_argument("--admin-token", help="the admin token of the shop at --url "
                                              "(default $SECKILL_ADMIN_TOKEN)")


def plan_from(args: argparse.Namespace) -> Plan:
    """The phases' plan; ``argparse.ArgumentTypeError`` for a ``LOCK_TIMEOUT_S`` in the
    environment that is not a number of seconds (it was a ValueError traceback)."""
    # the drain must outlast the shop's lock timeout (--url: its own; 10 s by default)
    if args.lock_timeout and not args.url:
        lock_timeout = args.lock_timeout
    else:
        try:
            lock_timeout = seconds(os.environ.get("LOCK_TIMEOUT_S", "10"))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"LOCK_TIMEOUT_S {exc}") from None
    if args.sustained:
        work_ms = 0 if args.work_ms is None else args.work_ms
        return Plan(users=args.users, stock=SUSTAINED_STOCK, work_ms=work_ms,
                    mode="sustained", duration=args.duration or 10, busy_retries=0,
                    drain_s=lock_timeout + 1)
    return Plan(users=args.users, stock=FLASH_STOCK if args.stock is None else args.stock,
                work_ms=20 if args.work_ms is None else args.work_ms,
                drain_s=lock_timeout + 1)


def run_showdown(target: Target, names: list[str], plan: Plan,
                 raw_dir: Path, rounds: int = 1, paired: bool = False) -> list[StrategyResult]:
    """One phase per strategy (plus the no-op baselines when sustained), with progress.

    Sustained runs start with two baselines: ``POST /api/noop`` through the purchase's
    own client code (the ratio's denominator, like for like) and the old bare ``GET``;
    the POST baseline runs again at the end, and the ratio's denominator is the mean of
    both (this machine's no-op rate moved 2,400-3,300/s between runs of one evening).
    With ``rounds`` the strategies run that many times, the POST baseline after each
    round, and each round is a share of the baselines on either side of it. ``paired``
    runs the POST baseline after every strategy phase instead, so that each phase's
    share is of the baselines just before and after that phase: with four strategies a
    round lasts minutes, and this machine's no-op rate moved by 60% within one run
    (docs/performance.md, sessions 14 and 15)."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    if plan.mode != "sustained":
        phases = [(name, strategy_safety(name), plan, 0) for name in names]
    else:
        noop = Plan(**{**plan.__dict__, "mode": "noop"})
        numbered = rounds > 1
        phases = [(BASELINE_POST, True, noop, 0),
                  (BASELINE_GET, True, Plan(**{**plan.__dict__, "mode": "noop-get"}), 0)]
        for k in range(1, rounds + 1):
            round_no = k if numbered else 0
            for j, name in enumerate(names, 1):
                phases.append((name, strategy_safety(name), plan, round_no))
                if paired and j < len(names):
                    shown = phase_label(name, plan.mode, round_no)
                    phases.append((f"no-op baseline (after {shown})", True, noop, round_no))
            after = BASELINE_POST_END if k == rounds else f"no-op baseline (round {k})"
            phases.append((after, True, noop, round_no))
    results = []
    for i, (name, safe, phase_plan, round_no) in enumerate(phases, 1):
        shown = phase_label(name, phase_plan.mode, round_no)
        steps = (f"{phase_plan.users} buyers ({phase_plan.mode})"
                 if phase_plan.mode in NOOP_MODES  # a baseline resets and audits nothing
                 else f"reset, {phase_plan.users} buyers ({phase_plan.mode}), audit")
        print(f"[{i}/{len(phases)}] {shown}: {steps} ...", flush=True)
        try:
            result = run_phase(target.shop, target.redis_clients, name, safe, phase_plan,
                               raw_dir, round_no)
        except KeyboardInterrupt:  # the phase under way is dropped: its figures are cut
            raise ShowdownInterrupted(results, len(phases)) from None
        except Exception as exc:  # noqa: BLE001 - one broken phase must not hide the rest
            if stopping():  # a Ctrl-C that kazoo swallowed: the next phase ran, with
                # every later stop signal ignored (``webapp.cli.STOPPING``; a labs audit)
                raise ShowdownInterrupted(results, len(phases)) from exc
            if isinstance(exc, (ShopError, PhaseBroken)):  # the shop said why (a refused
                # reset), or what the run lacks (Locust killed, a short arrival log): no
                logger.error("phase %s failed: %s", shown,  # traceback
                             str(exc).splitlines()[0])
            else:
                logger.exception("phase %s failed", shown)
            result = _broken(name, safe, phase_plan, round_no, str(exc))
        results.append(result)
        try:
            print(f"      {_summary(result)}", flush=True)
        except KeyboardInterrupt:
            raise ShowdownInterrupted(results, len(phases)) from None
    return results


def _broken(name: str, safe: bool, plan: Plan, round_no: int, error: str) -> StrategyResult:
    """A phase's ERROR row: its plan's buyers and stock, and no audit (consistent None).
    It said "users 0, stock 0, consistent NO" of a sale no audit had read (a showdown
    audit)."""
    return StrategyResult(name, safe, mode=plan.mode, error=error, round_no=round_no,
                          users=plan.users, stock=plan.stock)


def _summary(r: StrategyResult) -> str:
    """A phase in one line, and what ``FAILED:`` says of a safe strategy that went wrong:
    so it names every cause the verdict weighs. It named only oversold and consistent,
    and a safe strategy that lost an order or sold to a buyer twice failed with "oversold
    0, consistent True" (a showdown audit)."""
    if r.error:
        return f"ERROR: {r.error}"
    if r.mode == "noop":
        return f"{r.purchases_per_s or 0:.0f} answers/s ({r.rps:.0f} req/s) in {r.seconds:.0f}s"
    if r.mode == "noop-get":
        return f"{r.rps:.0f} req/s in {r.seconds:.0f}s"
    return (f"sold {r.sold}, oversold {r.oversold}, lost {r.lost}, duplicate buyers "
            f"{r.duplicates}, consistent {r.consistent}, "
            f"{r.rps:.0f} req/s, verdict {r.verdict} ({r.seconds:.0f}s)")


def _unwritable(report_dir: Path | None, json_file: str | None) -> str | None:
    """Why the report could not be written, found before the run rather than after it.
    The folders made to check are removed again (``folders_made_for_a_check``)."""
    if report_dir is not None:
        with folders_made_for_a_check(report_dir):
            problem = _unwritable_report(report_dir)
        if problem is not None:
            return problem
    problem = None if json_file is None else unwritable_file(Path(json_file), make_parent=True)
    return None if problem is None else f"--json {json_file}: {problem}"


def _unwritable_report(report_dir: Path) -> str | None:
    if report_dir.exists() and not report_dir.is_dir():  # was "File exists"
        return (f"--report {report_dir}: a file, not a directory (--report names a "
                "folder: the run writes DIR/index.html and DIR/raw/)")
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--report {report_dir}: {exc.strerror or exc}"
    if not os.access(report_dir, os.W_OK):
        return f"--report {report_dir}: not writable"
    # what the run writes into it: a file where raw/ goes, or a directory where a
    # page goes, failed after the shop was served or after the whole run
    raw = report_dir / "raw"
    if raw.exists() and not raw.is_dir():
        return f"--report {report_dir}: {raw} is not a directory"
    for name in ("index.html", "summary.json"):
        if (report_dir / name).is_dir():
            return f"--report {report_dir}: {report_dir / name} is a directory"
    return None


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    try:
        plan = plan_from(args)
    except argparse.ArgumentTypeError as exc:
        print(f"seckill showdown: error: {exc}", file=sys.stderr)
        return 2
    report_dir = Path(args.report) if args.report else None
    problem = None
    if args.rounds > 1 and not args.sustained:
        problem = "--rounds is for --sustained runs (a flash sale is over in one round)"
    if args.paired and not args.sustained:
        problem = "--paired is for --sustained runs (a flash sale has no no-op baseline)"
    if args.duration is not None and not args.sustained:  # was silently ignored
        problem = "--duration is for --sustained runs (a flash sale ends with its stock)"
    if args.stock is not None and args.sustained:  # was silently 1,000,000 (a showdown
        # audit: the report's settings then said "stock: 1000000")
        problem = (f"--stock is for flash sales; a --sustained phase has {SUSTAINED_STOCK:,} "
                   "units, more than its buyers can buy")
    if args.sustained and args.work_ms is not None and \
            args.work_ms >= 1000 * (args.duration or 10):
        # no purchase could be answered before the run's end: every phase broke with
        # "Locust made no requests" (a showdown audit)
        problem = (f"--work-ms {args.work_ms} is at or above the sustained phase's "
                   f"--duration of {args.duration or 10} s: no purchase would be answered "
                   "within it")
    if args.admin_token is not None and not args.url:  # was silently ignored
        problem = ("--admin-token is for a shop at --url; the shop the showdown serves "
                   "makes its own")
    if args.url and (args.workers is not None or args.lock_timeout is not None):
        # both set the shop the showdown serves; a shop at --url keeps its own
        problem = ("--workers and --lock-timeout set the shop the showdown serves; the "
                   "shop at --url keeps its own (its LOCK_TIMEOUT_S: set it here too, "
                   "for the showdown's drain)")
    if args.report == "":  # wrote no report and exited 0; --json '' was refused
        problem = "--report needs a directory name (like --report report/)"
    if args.json == "":  # Path("") is ".": "--json : . is a directory, not a file"
        problem = "--json needs a file name (like --json results.json)"
    if args.url and problem is None:  # the shop's Redis, read for redis/purchase: a bad
        problem = malformed_redis_urls()  # URL was a traceback after the shop was asked
    if args.url and problem is None:
        token, name = ((args.admin_token, "--admin-token") if args.admin_token
                       else (os.environ.get("SECKILL_ADMIN_TOKEN", ""), "SECKILL_ADMIN_TOKEN"))
        problem = unsendable_token(token, name)
    if problem is None:  # last: it makes the folders, which a usage error must not
        problem = _unwritable(report_dir, args.json)
    if problem is not None:
        print(f"seckill showdown: error: {problem}", file=sys.stderr)
        return 2
    # SIGTERM (kill, timeout, CI) unwinds like Ctrl-C (``webapp.cli``), so the shop, its
    # Redis nodes and ZooKeeper are stopped instead of left running with no parent
    from webapp.served import StartupError  # the shop could not be served (slow: Flask)

    try:
        return _run(args, plan, report_dir, started)
    except (ShopUnreachable, StartupError) as exc:
        if stopping():  # the Ctrl-C, swallowed while serving the shop (by kazoo)
            raise
        print(f"seckill showdown: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("showdown interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, plan: Plan, report_dir: Path | None,
         started: float) -> int:
    requested: list[str] = args.strategies or []  # parsed once, by strategy_list
    # the served shop's log beside the phases' raw files (with --report; else it goes
    # with the scratch folder); a shop at --url keeps its own
    shop_log = report_dir / "raw" / SHOP_LOG if report_dir else None
    interrupted: ShowdownInterrupted | None = None
    with serve_target(args, requested or strategy_names(), named=bool(requested),
                      log_path=shop_log) as target:
        names = target.strategies
        kept_log = target.shop_log
        raw_dir = (report_dir / "raw") if report_dir else Path(target.scratch) / "raw"
        try:
            results = run_showdown(target, names, plan, raw_dir,
                                   args.rounds if args.sustained else 1, args.paired)
        except ShowdownInterrupted as exc:
            if not exc.results:  # nothing to report: the plain interrupt
                raise
            interrupted, results = exc, exc.results
        machine = target.describe()
    elapsed = time.monotonic() - started
    if interrupted is not None:  # the shop and its servers are stopped by now
        print(f"\nshowdown {interrupted.note}; everything it started is stopped")
    print()
    print(format_table(results))
    rounds = format_rounds(results)
    if rounds:
        print(f"\n{rounds}")
    for note in table_notes(results):
        print(note)
    if args.url and not os.environ.get("REDIS_URL") and not any(
            r.redis_per_purchase is not None for r in results):
        # a shop at --url keeps its Redis to itself: the column was blank, unexplained
        print("note: redis/purchase needs the shop's Redis: set REDIS_URL (and "
              "REDLOCK_URLS) to the shop's for the showdown too")
    summary = {"settings": {**plan.__dict__, "strategies": names}, "machine": machine,
               "elapsed_s": round(elapsed, 1), "results": [r.as_dict() for r in results]}
    if interrupted is not None:
        summary["interrupted"] = interrupted.note
    if report_dir:
        from .report import write_report
        try:
            report_dir.mkdir(parents=True, exist_ok=True)  # checked, not kept, up front
            (report_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            also = [kept_log.name] if kept_log is not None else []
            print(f"\nreport: {write_report(report_dir, results, summary, also).resolve()}")
        except OSError as exc:  # a disk that filled during the run
            print(f"seckill showdown: error: could not write the report in {report_dir}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return 1
    if args.json and not write_results(Path(args.json), json.dumps(summary, indent=2),
                                       "showdown"):
        return 1
    bad = failed(results)
    for r in bad:
        why = f"phase broke: {r.error}" if r.error else f"marked safe but {_summary(r)}"
        if r.verdict == NOTHING_SOLD:
            top = ", ".join(f"{n} x {o}" for o, n in sorted(r.outcomes.items(),
                                                                key=lambda kv: -kv[1])[:3])
            why = f"sold nothing to {r.users} buyers ({top or 'no answers'}): is its server up?"
        print(f"FAILED: {r.strategy}: {why}")
    if report_dir is None and any(r.error for r in bad):
        # the logs they name were in the scratch folder, removed with the shop
        print("(the logs named above were in a scratch folder, removed on exit: "
              "--report DIR keeps them)")
    print(f"showdown took {elapsed:.0f}s")
    if interrupted is not None:  # the phases that ran are judged above; the run is not
        print(f"showdown {interrupted.note}")
        return 130
    return 1 if bad else 0
