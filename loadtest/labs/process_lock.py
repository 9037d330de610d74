"""Lab: a process-local lock holds inside one process and oversells across workers (seed 000).

Act 1, one process: N threads sell a Redis stock with a read-modify-write (GET, work,
SET). Without a lock they oversell; with lockcore's ``local`` lock (a
``threading.Lock`` per name) the count is exact. The lock is correct for what it is.

Act 2, the real storefront: gunicorn with two workers, the sale set to ``local``. Each
worker process has its own ``threading.Lock``; the two never see each other, so two
buyers, one per worker, are inside "the" critical section at once, and the audit finds
more orders than units. Switch the same sale to ``token`` (the lock lives in Redis,
shared by every worker) and it never sells more than its stock. Seed 000's point: a lock
guards what its holders share, and gunicorn workers share only Redis and the database.
"""

from __future__ import annotations

import time
from typing import Any

import redis

import lockcore

from .crowd import crowd_at_the_gate, flash_sale, lab_storefront
from .narration import Narrator, Verdict

TITLE = "a process-local lock: exact within one process, oversells across gunicorn workers"
SEED = "000"

THREADS = 16
THREAD_BUYERS = 160
THREAD_STOCK = 40
BUYERS = 300
STOCK = 50
WORK_MS = 20
WORKERS = 2


def _sell_in_threads(client: redis.Redis, strategy: str | None) -> int:
    """THREAD_BUYERS buyers on THREADS threads of this process; returns units sold.

    Each buyer builds its own handle, as each request does in the web app; ``local``
    handles of one name share one ``threading.Lock`` per process."""
    client.set("lab:stock", THREAD_STOCK)
    client.set("lab:sold", 0)
    with crowd_at_the_gate(THREADS) as (pool, start):

        def buy() -> None:
            start.wait()
            guard: Any = _NoLock()
            if strategy is not None:
                guard = lockcore.create(strategy, None, "stock:lab", timeout=30.0)
            with guard:
                stock = int(client.get("lab:stock") or 0)
                if stock <= 0:
                    return
                time.sleep(WORK_MS / 10_000)  # a little work between the read and the write
                client.set("lab:stock", stock - 1)
                client.incr("lab:sold")

        futures = [pool.submit(buy) for _ in range(THREAD_BUYERS)]
        start.set()
        for future in futures:
            future.result()
    return int(client.get("lab:sold") or 0)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run(narrator: Narrator, *, buyers: int = BUYERS, stock: int = STOCK) -> Verdict:
    narrator("starting the storefront: gunicorn with %d gevent workers", WORKERS)
    with lab_storefront(WORKERS) as app:
        narrator("storefront at %s (Redis %s)", app.url, app.redis_url)
        assert app.redis_url is not None  # ServedApp started its own Redis
        client = redis.Redis.from_url(app.redis_url)
        narrator.section(f"act 1: one process, {THREADS} threads, {THREAD_STOCK} units")
        unlocked = _sell_in_threads(client, None)
        narrator("no lock: %d sales recorded for %d units (lost updates)", unlocked, THREAD_STOCK)
        in_process = _sell_in_threads(client, "local")
        narrator("local lock: %d units sold out of %d", in_process, THREAD_STOCK)
        client.close()
        narrator.section(f"act 2: {WORKERS} gunicorn workers, strategy local")
        across = flash_sale(narrator, app, "local", buyers=buyers, stock=stock, work_ms=WORK_MS)
        narrator.section(f"act 3: {WORKERS} gunicorn workers, strategy token")
        token = flash_sale(narrator, app, "token", buyers=buyers, stock=stock, work_ms=WORK_MS)
    narrator("storefront stopped")
    facts: dict[str, Any] = {"threads_unlocked_sold": unlocked,
                             "threads_local_sold": in_process, "thread_stock": THREAD_STOCK,
                             "workers_local_oversold": across.oversold,
                             "workers_token_oversold": token.oversold,
                             "workers_token_sold": token.units_sold, "stock": stock}
    demonstrated = (unlocked > THREAD_STOCK and in_process == THREAD_STOCK
                    and across.oversold > 0 and token.oversold == 0
                    and bool(token.audit["consistent"]))
    line = (f"local lock in one process: {in_process}/{THREAD_STOCK} sold (no lock: "
            f"{unlocked}); across {WORKERS} gunicorn workers it oversold {across.oversold} of "
            f"{stock}; token oversold {token.oversold}")
    return Verdict(demonstrated, line, facts)
