"""What writing an ``atomic`` purchase's order row costs our own code, in one process.

    python -m loadtest.bench.takenrows                  # 70 rows a batch, 42,000 rows
    python -m loadtest.bench.takenrows --batch 20 --profile

``orderwrites`` measures SQLite alone, on its own statements. This measures the path a
served ``atomic`` purchase takes after its script: the script batch's leader builds
every row (``TakenOrder.row``) and writes them in one transaction
(``takenorders.write_taken`` -> ``OrderWriter.write_now``), on an engine made by the
app's own ``make_engine``, on a SQLite file migrated to the head. The difference
between the two is our Python: building the rows, SQLAlchemy's transaction, the
INSERT's parameters, matching the ids.

It prints CPU time per row; with ``--profile``, cProfile's top functions instead (its
own overhead inflates the Python calls, not SQLite's). Under load a served batch holds
~70 purchases (``ScriptPipeline``'s counts, one showdown phase, session 13), so 70 is
the default. The buyer ids are made before the clock starts. docs/performance.md,
session 13, has the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from datetime import UTC, datetime

from sqlalchemy.orm import sessionmaker

from loadtest.bench.orderwrites import buyer_batches
from webapp import db
from webapp.extensions import make_engine
from webapp.saleinfo import SaleInfo, generation
from webapp.takenorders import TakenOrder, write_taken

STARTED = datetime(2026, 11, 24, tzinfo=UTC)

#: what ``atomic_checkout.lua`` answers a purchase that took its unit, when the caller
#: already knows the sale's generation (no hash copy): code 1, units left
TAKEN = [1, 7]


def measure(batch: int, rows: int, profile: bool = False) -> float:
    """CPU us per row over ``rows`` rows written ``batch`` a transaction (after a few
    transactions of warm-up); with ``profile``, prints cProfile's top 25 as well."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/shop.sqlite"
        db.upgrade(url)
        engine = make_engine(url)
        sessions = sessionmaker(bind=engine)
        with engine.begin() as connection:
            connection.exec_driver_sql("INSERT INTO products VALUES ('sku-1', 'x', 1, '')")
            connection.exec_driver_sql(
                "INSERT INTO sales (id, sku, initial_stock, remaining, strategy, work_ms, "
                "per_user_limit, started_at) VALUES (1, 'sku-1', ?, ?, 'atomic', 0, 1, ?)",
                (rows + 10 * batch, rows + 10 * batch, "2026-11-24 00:00:00.000000"))
        sale = SaleInfo(1, "sku-1", "atomic", 0, 1, rows, generation(STARTED))
        batches = buyer_batches(batch, rows // batch + 5)

        def write(users: list[str]) -> None:
            follow = [(TakenOrder(sessions, "sku-1", user, 1, sale), TAKEN) for user in users]
            write_taken(follow)
            for then, _ in follow:
                assert then.written is not None and then.written.error is None

        for users in batches[:5]:
            write(users)
        profiler = cProfile.Profile() if profile else None
        cpu = time.process_time()
        if profiler is not None:
            profiler.enable()
        for users in batches[5:]:
            write(users)
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu
        engine.dispose()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return cpu / (len(batches[5:]) * batch) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=42_000)
    parser.add_argument("--batch", type=int, default=70, help="rows per transaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one round")
    args = parser.parse_args(argv)
    if args.profile:
        measure(args.batch, args.rows, profile=True)
        return
    runs = [measure(args.batch, args.rows) for _ in range(args.rounds)]
    print(f"{args.rows:,} rows, {args.batch} per transaction: CPU us per row "
          + " ".join(f"{run:.1f}" for run in runs))


if __name__ == "__main__":
    main()
