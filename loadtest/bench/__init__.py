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
from pathlib import Path

from .contenders import CONTENDERS
from .experiments import EXPERIMENTS
from .report import render, targets
from .runner import BenchConfig, run

logger = logging.getLogger(__name__)

#: --quick: enough to exercise every code path in a few seconds, not to measure anything
QUICK = {"duration": 1.0, "uncontended": 0.3, "processes": 4}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds of the contended run per contender (default 5)")
    parser.add_argument("--uncontended", type=float, default=2.0, metavar="SECONDS",
                        help="seconds of the solo acquire+release loop (default 2)")
    parser.add_argument("--processes", type=int, default=8,
                        help="worker processes on the hot lock (default 8)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each contender this many times, round-robin, and add "
                             "the rounds up (steadier figures on a busy machine)")
    parser.add_argument("--only", default="",
                        help="comma-separated contenders (see --list)")
    parser.add_argument("--experimental", action="store_true",
                        help="also run the prototype protocols of loadtest/bench/experiments.py")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 s, 4 processes (overrides the sizes above)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    parser.add_argument("--list", action="store_true", help="list the contenders and exit")


def main(args: argparse.Namespace) -> int:
    if args.list:
        for c in CONTENDERS + EXPERIMENTS:
            why = c.unavailable()
            print(f"{c.name:18} {c.library:18} {c.backend:9} {c.settings}"
                  + (f"  (unavailable: {why})" if why else ""))
        return 0
    config = BenchConfig(duration=args.duration, uncontended=args.uncontended,
                         processes=args.processes, rounds=args.rounds,
                         experimental=args.experimental,
                         only=[n.strip() for n in args.only.split(",") if n.strip()] or None)
    if args.quick:
        config.duration = QUICK["duration"]
        config.uncontended = QUICK["uncontended"]
        config.processes = int(QUICK["processes"])
    if min(config.duration, config.uncontended) <= 0 or min(config.processes,
                                                             config.rounds) < 1:
        raise SystemExit("--duration and --uncontended must be > 0, --processes and "
                         "--rounds >= 1")
    outcome = run(config)
    outcome["targets"] = targets(outcome["results"])
    print(render(outcome), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(outcome, indent=2) + "\n", encoding="utf-8")
        print(f"figures written to {args.json}")
    broken = [r["name"] for r in outcome["results"] if r["errors"] or
              (r.get("contended") or {}).get("overlaps")]
    return 1 if broken else 0
