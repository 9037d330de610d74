"""What writing an order costs SQLite, by schema revision and file layout.

    python -m loadtest.bench.orderwrites            # every variant, 60,000 orders each

Each variant migrates a new SQLite file (``webapp.db.upgrade``, to ``0001`` or to the
head) made with a given page size, then writes orders as the group commit does under
load: per transaction, the sale's UPDATE and one multi-row ``INSERT ... RETURNING`` of
``--batch`` buyers with random ids (the showdown's ``buyer-<pid>-<12 hex>``), in WAL
mode with ``synchronous=NORMAL``. It prints wall and CPU time per order, and the
longest transaction (the one a checkpoint ran in). The buyer ids are made before the
clock starts. docs/performance.md, session 12, has the figures.
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


def measure(variant: Variant, orders: int, batch: int) -> tuple[float, float, float]:
    """(wall us, CPU us) per order, and the longest transaction in ms (a checkpoint's
    stall: in a gevent worker, nothing else runs meanwhile)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "shop.sqlite")
        made = sqlite3.connect(path)
        made.execute(f"PRAGMA page_size={variant.page_size}")
        made.execute("PRAGMA journal_mode=WAL")  # writes the header: the layout is fixed
        made.close()
        db.upgrade(f"sqlite:///{path}", variant.revision)
        connection = sqlite3.connect(path, isolation_level=None)
        for pragma in ("synchronous=NORMAL", "foreign_keys=ON",
                       f"wal_autocheckpoint={variant.checkpoint_pages}"):
            connection.execute(f"PRAGMA {pragma}")
        connection.execute("INSERT INTO products VALUES ('sku-1', 'x', 1, '')")
        connection.execute("INSERT INTO sales (id, sku, initial_stock, remaining, strategy, "
                           "work_ms, per_user_limit, started_at) "
                           "VALUES (1, 'sku-1', ?, ?, 'atomic', 0, 1, ?)",
                           (orders, orders, STARTED))
        insert = ("INSERT INTO orders (sale_id, sku, user_id, quantity, strategy, "
                  "fencing_token, idempotency_key, created_at) VALUES "
                  + ", ".join(["(1, 'sku-1', ?, 1, 'atomic', NULL, NULL, ?)"] * batch)
                  + " RETURNING id, sale_id, user_id")
        pids = [os.getpid() + n for n in range(4)]  # four Locust processes' buyers
        batches = [[value for n in range(batch) for value in
                    (f"buyer-{pids[n % 4]}-{uuid.uuid4().hex[:12]}", "2026-11-24 09:00:00")]
                   for _ in range(orders // batch)]
        longest = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        for rows in batches:
            began = time.perf_counter()
            connection.execute("BEGIN")
            connection.execute("UPDATE sales SET remaining = remaining - ? "
                               "WHERE id = 1 AND started_at = ?", (batch, STARTED))
            connection.execute(insert, rows).fetchall()
            connection.execute("COMMIT")  # a checkpoint runs inside the COMMIT past it
            longest = max(longest, time.perf_counter() - began)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        connection.close()
    done = len(batches) * batch
    return wall / done * 1e6, cpu / done * 1e6, longest * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10, help="orders per transaction")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"{args.orders:,} orders per variant, {args.batch} per transaction; us per order")
    for name, variant in VARIANTS.items():
        runs = [measure(variant, args.orders, args.batch) for _ in range(args.rounds)]
        print(f"{name:40s} wall " + " ".join(f"{w:5.1f}" for w, _, _ in runs)
              + "   cpu " + " ".join(f"{c:5.1f}" for _, c, _ in runs)
              + "   longest ms " + " ".join(f"{m:5.1f}" for _, _, m in runs))


if __name__ == "__main__":
    main()
