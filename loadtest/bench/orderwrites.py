"""What writing an order costs SQLite, by schema revision and file layout.

    python -m loadtest.bench.orderwrites            # every variant, 60,000 orders each
    python -m loadtest.bench.orderwrites --batch 33 --others 180000 --connections 2

Each variant migrates a new SQLite file (``webapp.db.upgrade``, to ``0001`` or to the
head) made with a given page size, then writes orders as the group commit does under
load: per transaction, the sale's UPDATE and one multi-row ``INSERT ... RETURNING`` of
``--batch`` buyers with random ids (the showdown's ``buyer-<pid>-<12 hex>``), in WAL
mode with ``synchronous=NORMAL``; optionally behind ``--others`` orders of another
sale, and from ``--connections`` connections taking turns (two served workers). It
prints wall and CPU time per order, and the longest transaction (the one a checkpoint
ran in). The buyer ids are made before the clock starts. docs/performance.md, session
12, has the figures.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from typing import NamedTuple

from webapp import db

STARTED = "2026-11-24 00:00:00.000000"


class Variant(NamedTuple):
    revision: str
    page_size: int
    checkpoint_pages: int


VARIANTS = {
    "before (0001, 4 KB, checkpoint 1,000)": Variant("0001", 4096, 1_000),
    "0002: no ix_orders_sale_id": Variant("head", 4096, 1_000),
    "2 KB pages": Variant("0001", 2048, 1_000),
    "checkpoint 10,000": Variant("0001", 4096, 10_000),
    "now (0002, 2 KB, checkpoint 10,000)": Variant("head", 2048, 10_000),
}


class Setup(NamedTuple):
    orders: int = 60_000
    #: orders per transaction
    batch: int = 10
    #: orders of another sale written first (the showdown's other strategies' sales)
    others: int = 0
    #: connections taking turns at the transactions (the two gunicorn workers: each
    #: finds the file changed by the other, and SQLite drops its page cache)
    connections: int = 1


def buyer_batches(batch: int, count: int) -> list[list[str]]:
    """``count`` transactions' buyer ids, ``batch`` each, shaped as Locust's
    (``buyer-<pid>-<12 hex>``) from four processes, made before any clock starts."""
    pids = [os.getpid() + n for n in range(4)]  # four Locust processes' buyers
    return [[f"buyer-{pids[n % 4]}-{uuid.uuid4().hex[:12]}" for n in range(batch)]
            for _ in range(count)]


def _buyers(batch: int, count: int) -> list[list[str]]:
    """``count`` transactions' parameters: (buyer id, created_at) for each order."""
    return [[value for buyer in buyers for value in (buyer, "2026-11-24 09:00:00")]
            for buyers in buyer_batches(batch, count)]


def _insert(sale_id: int, batch: int) -> str:
    return ("INSERT INTO orders (sale_id, sku, user_id, quantity, strategy, "
            "fencing_token, idempotency_key, created_at) VALUES "
            + ", ".join([f"({sale_id}, 'sku-{sale_id}', ?, 1, 'atomic', NULL, NULL, ?)"]
                        * batch)
            + " RETURNING id, sale_id, user_id")


def measure(variant: Variant, setup: Setup) -> tuple[float, float, float]:
    """(wall us, CPU us) per order, and the longest transaction in ms (a checkpoint's
    stall: in a gevent worker, nothing else runs meanwhile)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "shop.sqlite")
        made = sqlite3.connect(path)
        made.execute(f"PRAGMA page_size={variant.page_size}")
        made.execute("PRAGMA journal_mode=WAL")  # writes the header: the layout is fixed
        made.close()
        db.upgrade(f"sqlite:///{path}", variant.revision)
        connections = [sqlite3.connect(path, isolation_level=None)
                       for _ in range(setup.connections)]
        for connection in connections:
            for pragma in ("synchronous=NORMAL", "foreign_keys=ON",
                           f"wal_autocheckpoint={variant.checkpoint_pages}"):
                connection.execute(f"PRAGMA {pragma}")
        first = connections[0]
        for sale_id in (1, 2):
            first.execute(f"INSERT INTO products VALUES ('sku-{sale_id}', 'x', 1, '')")
            first.execute("INSERT INTO sales (id, sku, initial_stock, remaining, strategy, "
                          "work_ms, per_user_limit, started_at) "
                          "VALUES (?, ?, ?, ?, 'atomic', 0, 1, ?)",
                          (sale_id, f"sku-{sale_id}", setup.orders, setup.orders, STARTED))
        first.execute("BEGIN")
        for rows in _buyers(setup.batch, setup.others // setup.batch):
            first.execute(_insert(2, setup.batch), rows).fetchall()
        first.execute("COMMIT")
        insert = _insert(1, setup.batch)
        batches = _buyers(setup.batch, setup.orders // setup.batch)
        longest = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        for turn, rows in enumerate(batches):
            connection = connections[turn % len(connections)]
            began = time.perf_counter()
            connection.execute("BEGIN")
            connection.execute("UPDATE sales SET remaining = remaining - ? "
                               "WHERE id = 1 AND started_at = ?", (setup.batch, STARTED))
            connection.execute(insert, rows).fetchall()
            connection.execute("COMMIT")  # a checkpoint runs inside the COMMIT past it
            longest = max(longest, time.perf_counter() - began)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for connection in connections:
            connection.close()
    done = len(batches) * setup.batch
    return wall / done * 1e6, cpu / done * 1e6, longest * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10, help="orders per transaction")
    parser.add_argument("--others", type=int, default=0,
                        help="orders of another sale in the table first")
    parser.add_argument("--connections", type=int, default=1,
                        help="connections taking turns at the transactions")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    setup = Setup(args.orders, args.batch, args.others, args.connections)
    print(f"{setup.orders:,} orders per variant, {setup.batch} per transaction, "
          f"{setup.others:,} of another sale first, {setup.connections} connection(s); "
          "us per order")
    for name, variant in VARIANTS.items():
        runs = [measure(variant, setup) for _ in range(args.rounds)]
        print(f"{name:40s} wall " + " ".join(f"{w:5.1f}" for w, _, _ in runs)
              + "   cpu " + " ".join(f"{c:5.1f}" for _, c, _ in runs)
              + "   longest ms " + " ".join(f"{m:5.1f}" for _, _, m in runs))


if __name__ == "__main__":
    main()
