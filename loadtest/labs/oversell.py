"""Lab: 1000 buyers, 100 units, a check-then-set "lock": the sale oversells (seed 002).

The storefront runs for real (gunicorn, two gevent workers, embedded Redis, SQLite).
With the ``naive`` strategy the lock itself is a check-then-act: ``GET lock`` ... ``SET
lock``. Hundreds of requests arrive together, several see the lock free in the same
instant, all of them read the same stock, and each writes ``stock - 1``: lost updates,
and more orders than units. The shop's audit counts the orders in the database.

The same crowd against the ``token`` lock (``SET NX PX``, one atomic command) never
sells more than the stock. ``work_ms`` is simulated business work inside the critical
section; it widens the window the way a real payment call or a slow query would.
"""

from __future__ import annotations

from typing import Any

from .crowd import flash_sale, lab_storefront
from .narration import Narrator, Verdict

TITLE = "1000 buyers, 100 units, a check-then-set lock: the sale oversells"
SEED = "002"

BUYERS = 1_000
STOCK = 100
WORK_MS = 5
WORKERS = 2


def run(narrator: Narrator, *, buyers: int = BUYERS, stock: int = STOCK) -> Verdict:
    narrator("starting the storefront: gunicorn with %d gevent workers", WORKERS)
    with lab_storefront(WORKERS) as app:
        narrator("storefront at %s", app.url)
        narrator.section("naive: GET lock, then SET lock")
        naive = flash_sale(narrator, app, "naive", buyers=buyers, stock=stock, work_ms=WORK_MS)
        narrator.section("token: SET lock NX PX")
        token = flash_sale(narrator, app, "token", buyers=buyers, stock=stock, work_ms=WORK_MS)
    narrator("storefront stopped")
    facts: dict[str, Any] = {"buyers": buyers, "stock": stock,
                             "naive_units_sold": naive.units_sold,
                             "naive_oversold": naive.oversold,
                             "token_units_sold": token.units_sold,
                             "token_oversold": token.oversold,
                             "token_consistent": token.audit["consistent"]}
    # token must never oversell; a buyer turned away busy (503) on a loaded machine
    # leaves a unit unsold, which is no safety failure
    demonstrated = naive.oversold > 0 and token.oversold == 0 and token.audit["consistent"]
    line = (f"{buyers} buyers, {stock} units: naive sold {naive.units_sold} "
            f"(oversold {naive.oversold}); token sold {token.units_sold} "
            f"(oversold {token.oversold})")
    return Verdict(demonstrated, line, facts)
