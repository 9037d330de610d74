"""Lock micro-benchmark: lockcore strategies and peer libraries side by side in one run.

Three workloads, identical for every contender, on redis-server (and ZooKeeper)
processes this command starts and stops itself:

* solo: one process in an acquire+release loop (the cost of the lock alone);
* contended: ``--processes`` processes on one hot lock for ``--duration`` seconds,
  critical section GET + DECR of a stock key, every wait recorded;
* RedLock on five independent servers (lockcore's ``redlock`` against pottery), and
  ZooKeeper (lockcore's ``zookeeper`` against kazoo) when ZooKeeper can be started.

Compare ratios within one run, not figures across machines or runs: the benchmark
runs the clients and the servers on the same cores. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from webapp.cli import STOP_SIGNALS, stop_on_term

from ..cliargs import at_least, comma_names, seconds_up_to, unwritable_file, write_results
from .contenders import CONTENDERS
from .experiments import EXPERIMENTS
from .pool import START_METHODS
from .report import render, targets
from .runner import BenchConfig, run

logger = logging.getLogger(__name__)

#: --quick: enough to exercise every code path in a few seconds, not to measure anything
QUICK = {"duration": 1.0, "uncontended": 0.3, "processes": 4}
#: rounds of every contender: the plan is built up front (a huge number filled memory)
MAX_ROUNDS = 100


def contender_names(text: str) -> list[str]:
    """Comma-separated names of contenders (an unknown one is a usage error)."""
    names = comma_names(text)
    if not names:  # "--only=" ran every contender, saying nothing
        raise argparse.ArgumentTypeError("no contender named (seckill bench --list names them)")
    known = {c.name for c in CONTENDERS + EXPERIMENTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown contender(s) {', '.join(unknown)} "
                                         "(seckill bench --list names them)")
    return names


# each worker holds pipes, a semaphore and Redis connections: beyond a few hundred the
# run ends in 'Too many open files' before it measures anything
MAX_PROCESSES = 256
#: a day; far past what a bench is for, far below the OverflowError of a huge timer
MAX_SECONDS = 86_400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=seconds_up_to(MAX_SECONDS), default=5.0,
                        help="seconds of the contended run per contender (default 5)")
    parser.add_argument("--uncontended", type=seconds_up_to(MAX_SECONDS), default=2.0,
                        metavar="SECONDS",
                        help="seconds of the solo acquire+release loop (default 2)")
    parser.add_argument("--processes", type=at_least(1, MAX_PROCESSES), default=8,
                        help=f"worker processes on the hot lock (default 8, at most "
                             f"{MAX_PROCESSES})")
    parser.add_argument("--rounds", type=at_least(1, MAX_ROUNDS), default=1,
                        help="measure each contender this many times, round-robin, and add "
                             "the rounds up (steadier figures on a busy machine; default: 1)")
    parser.add_argument("--only", type=contender_names, default=[],
                        help="comma-separated contenders (see --list)")
    parser.add_argument("--experimental", action="store_true",
                        help="also run the prototype protocols of loadtest/bench/experiments.py")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 s contended, 0.3 s solo, 4 processes "
                             "(overrides the sizes above)")
    parser.add_argument("--start-method", choices=START_METHODS, default=START_METHODS[0],
                        help="how the worker processes start: fresh interpreters (spawn, "
                             "the default) or forked from one clean process (forkserver, "
                             "as gunicorn forks its workers); it moves the hand-off locks "
                             "against the barging ones, so compare within one")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    parser.add_argument("--list", action="store_true",
                        help="list the contenders (those --only names, given it) and exit")


def main(args: argparse.Namespace) -> int:
    if args.list:  # with --only: those named (it was ignored, and every one listed)
        for c in CONTENDERS + EXPERIMENTS:
            if args.only and c.name not in args.only:
                continue
            why = c.unavailable()
            print(f"{c.name:18} {c.library:18} {c.backend:9} {c.settings}"
                  + (f"  (unavailable: {why})" if why else ""))
        return 0
    if args.json is not None:  # found before minutes of measuring, not after
        problem = unwritable_file(args.json, make_parent=True)  # main makes it too
        if problem is not None:
            print(f"seckill bench: error: --json {args.json}: {problem}", file=sys.stderr)
            return 2
    config = BenchConfig(duration=args.duration, uncontended=args.uncontended,
                         processes=args.processes, rounds=args.rounds,
                         experimental=args.experimental, start_method=args.start_method,
                         only=list(args.only) or None)
    if args.quick:
        config.duration = QUICK["duration"]
        config.uncontended = QUICK["uncontended"]
        config.processes = int(QUICK["processes"])
    # SIGTERM (kill, timeout, CI) unwinds like Ctrl-C: the workers, the redis-servers
    # and ZooKeeper this run started are stopped by pid instead of left running. As
    # ``seckill`` already arranges (``webapp.cli``), but main is also called in-process
    # (a shell starts a background job with SIGINT ignored: `kill -INT` must still stop
    # it; and the first of them ignores the rest while the run stops what it started)
    previous = {stop_signal: signal.signal(stop_signal, stop_on_term)
                for stop_signal in STOP_SIGNALS}
    try:
        outcome = run(config)
    except KeyboardInterrupt:
        print("bench interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    finally:  # called in-process (the tests): leave the caller's handlers as they were
        for stop_signal, handler in previous.items():
            signal.signal(stop_signal, handler)
    outcome["targets"] = targets(outcome["results"])
    print(render(outcome), flush=True)
    if args.json:
        if not write_results(args.json, json.dumps(outcome, indent=2) + "\n", "bench"):
            return 1
        print(f"figures written to {args.json}")
    broken = [r["name"] for r in outcome["results"] if r["errors"] or
              (r.get("contended") or {}).get("overlaps")]
    if not outcome["results"]:  # every contender asked for was skipped: an empty table
        # and exit 0 read as a run that measured them (a bench audit)
        print("seckill bench: nothing measured: every contender asked for was skipped "
              "(the reasons above)", file=sys.stderr)
        return 1
    return 1 if broken else 0
