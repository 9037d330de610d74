"""Past one machine, on one machine: two web hosts, one Redis, one PostgreSQL, Locust
master and two workers.

What makes a second web host safe is that nothing a purchase depends on lives in the
web process: the stock, the buyers set and the locks are in the shared Redis, the
orders in the shared PostgreSQL. This run starts exactly that topology on loopback
(``docs/deployment.md`` draws it with real hosts), sends worker 1's buyers to host A
and worker 2's to host B (``multihost_users.py``), and audits the sale through both
hosts: for a safe strategy they must agree, and the books must balance exactly.

``python -m loadtest.multihost --users 200 --stock 50 --strategies token,atomic``
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcore.embedded import EmbeddedRedis
from webapp.served import StartupError

from . import arrivals
from .cliargs import at_least
from .multihost_db import DatabaseUnavailable, temporary_database
from .multihost_locust import LocustCluster
from .serving import strategy_safety
from .shop import ShopClient, ShopError, ShopUnreachable
from .showdown import MAX_USERS, SHOP_MAX_STOCK, strategy_list

logger = logging.getLogger(__name__)

SKU = "sku-1"


@dataclass
class HostRun:
    """One strategy's run across the two hosts."""

    strategy: str
    audits: list[dict[str, Any]]  # the same audit, asked of each host
    orders_by_host: dict[str, int]
    outcomes: Counter[str]
    locust_exit: int

    @property
    def exact(self) -> bool:
        first = self.audits[0]
        return all(a == first for a in self.audits) and bool(first["consistent"])

    def problems(self, *, safe: bool) -> list[str]:
        """Why this run fails, if it does: the hosts disagree, a safe strategy's books do
        not balance, its buyers were told of orders the database does not hold or heard
        wrong answers, or nothing sold at all (a run that
        proved nothing: it printed "exact: True" and exited 0)."""
        first, found = self.audits[0], []
        if any(a != first for a in self.audits):
            found.append("the hosts' audits differ")
        if safe and not first["consistent"]:
            found.append("the books do not balance")
        told, rows = sum(self.orders_by_host.values()), int(first.get("orders", 0))
        if safe and told > rows:  # the showdown's "lost" (phase.py), across the hosts
            found.append(f"{told - rows} buyer(s) told of an order the database does not "
                         f"hold ({told} told, {rows} rows)")
        if safe and self.locust_exit != 0:
            found.append(f"Locust counted wrong answers (exit {self.locust_exit}): "
                         f"{dict(self.outcomes)}")
        if first["initial_stock"] > 0 and first["units_sold"] == 0:
            found.append(f"nothing sold (the buyers' answers: {dict(self.outcomes) or 'none'})")
        return found


@contextlib.contextmanager
def two_hosts(workers: int = 1, admin_url: str | None = None) -> Iterator[list[Any]]:
    """Two ``ServedApp`` hosts sharing one embedded Redis and one temporary database."""
    from webapp.serve import ServedApp

    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(EmbeddedRedis(1)).urls[0]
        database_url = stack.enter_context(temporary_database(admin_url))
        token = os.urandom(12).hex()
        env = {"SECKILL_ADMIN_TOKEN": token}
        hosts = []
        for seed in (True, False):  # the first host migrates and seeds, the second joins
            hosts.append(stack.enter_context(ServedApp(
                workers=workers, redis_url=redis_url, database_url=database_url,
                redlock_urls=[], env=env, seed=seed)))
        yield hosts


def run_strategy(hosts: list[Any], strategy: str, *, users: int, stock: int,
                 run_time_s: int, workdir: Path) -> HostRun:
    shops = [ShopClient(h.url, h.admin_token) for h in hosts]
    shops[0].reset_sale(SKU, stock, strategy, 0)
    log = workdir / f"arrivals-{strategy}.jsonl"
    cluster = LocustCluster(
        locustfiles=["multihost_users.py", "shapes.py"], targets=[h.url for h in hosts],
        users=users, run_time_s=run_time_s, workdir=workdir,
        options={"--seckill-sku": SKU, "--seckill-stock": str(stock),
                 "--seckill-arrivals": str(log)})
    exit_code = cluster.run()
    attempts = arrivals.read_arrivals(log)
    host_of = {pid: hosts[i % len(hosts)].url for i, pid in enumerate(cluster.worker_pids)}
    orders: Counter[str] = Counter()
    for a in attempts:
        if a.outcome == "order":
            orders[host_of.get(int(a.user.split("-")[1]), "?")] += 1
    return HostRun(strategy, [shop.audit(SKU) for shop in shops], dict(orders),
                   Counter(a.outcome for a in attempts), exit_code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=at_least(1, MAX_USERS), default=200)
    parser.add_argument("--stock", type=at_least(1, SHOP_MAX_STOCK), default=50)
    parser.add_argument("--strategies", type=strategy_list, default="token,atomic",
                        help="comma-separated (default token,atomic)")
    parser.add_argument("--run-time", type=at_least(1), default=30,
                        help="hard cap per strategy, from the buyers' start (s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="seckill-multihost-"))
    logger.info("work dir (Locust's logs, removed at the end): %s", workdir)
    failed = False
    try:
        with two_hosts() as hosts:
            print("hosts: " + "  ".join(h.url for h in hosts), flush=True)
            for strategy in args.strategies:
                run = run_strategy(hosts, strategy, users=args.users, stock=args.stock,
                                   run_time_s=args.run_time, workdir=workdir)
                audit = run.audits[0]
                print(f"{strategy:>15}: orders by host {run.orders_by_host}  "
                      f"sold {audit['units_sold']}/{audit['initial_stock']}  "
                      f"remaining {audit['remaining']}  oversold {audit['oversold']}  "
                      f"hosts agree and exact: {run.exact}", flush=True)
                problems = run.problems(safe=strategy_safety(strategy))
                if problems:
                    print(f"{'':>15}  FAIL: {'; '.join(problems)}", flush=True)
                elif not run.exact:
                    print(f"{'':>15}  unsafe, as taught", flush=True)
                failed |= bool(problems)
    except KeyboardInterrupt:
        print("interrupted: stopped what this run started", file=sys.stderr)
        return 130
    except (DatabaseUnavailable, ShopError, ShopUnreachable, StartupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    from webapp.cli import stop_like_ctrl_c

    stop_like_ctrl_c()  # SIGTERM unwinds like Ctrl-C: the hosts, Locust and the database go
    sys.exit(main())
