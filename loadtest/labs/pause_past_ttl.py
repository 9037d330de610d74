"""Lab: a holder frozen past its TTL wakes up and writes after the next holder; only the
storage can refuse it (seed 004's open question, answered with fencing tokens).

A (a child process) takes a ``token`` lock with a short TTL, reads stock 100 from the
database and is frozen by SIGSTOP (a GC pause, swap, a stalled VM) before it writes.
The TTL runs out; B takes the lock, sells one unit (stock 99) and leaves. A is resumed
and writes the 99 it computed before the pause. Two units sold, stock says one: the
lock was never "broken", A simply did not know it had lost it. No watchdog helps, its
thread was frozen too.

With fencing, every write carries ``lock.fencing_token`` and the database refuses a
token older than the newest it has accepted (``UPDATE ... WHERE last_token <= :t``, one
statement, so the check cannot race the write). A's stale write changes no row; A
learns it lost the lock and must not confirm the sale. ``lockcore.fencing.FencedStore``
is the same check for data kept in Redis.

The child's stdin is the gate between "read" and "write", so SIGSTOP always lands at
that point: deterministic, not a race against a sleep.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import lockcore

from .holder import MAX_LIFE_S, Child
from .narration import Narrator, Verdict
from .servers import lab_client

TITLE = "a holder paused past its TTL writes after the next one; fencing tokens refuse it"
SEED = "004"

TTL_MS = 500
STOCK = 100
UNFENCED = "UPDATE stock SET qty = :qty, last_token = :token WHERE sku = 'sku-1'"
FENCED = UNFENCED + " AND last_token <= :token"


def sell_one(db: sqlite3.Connection, qty_read: int, token: int, fenced: bool) -> bool:
    """Write the stock computed from ``qty_read``; False if the fence refused the write."""
    with db:
        cursor = db.execute(FENCED if fenced else UNFENCED, {"qty": qty_read - 1, "token": token})
    return cursor.rowcount == 1


def read_stock(db: sqlite3.Connection) -> int:
    qty: int = db.execute("SELECT qty FROM stock WHERE sku = 'sku-1'").fetchone()[0]
    return qty


def _story(narrator: Narrator, client: Any, url: str, workdir: Path,
           fenced: bool) -> dict[str, Any]:
    path = workdir / f"shop-{'fenced' if fenced else 'plain'}.sqlite3"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INT, last_token INT)")
        db.execute("INSERT INTO stock VALUES ('sku-1', ?, 0)", (STOCK,))
    with Child(__name__, [url, str(path), "1" if fenced else "0"]) as a:
        a_token, _, a_read = a.expect("ACQUIRED").partition(" READ ")
        narrator("A (pid %d) acquires (ttl %d ms, fencing token %s), reads stock %s",
                 a.pid, TTL_MS, a_token, a_read)
        a.signal(signal.SIGSTOP)
        a.send("write")  # waits in the pipe until A runs again
        narrator("A is frozen by SIGSTOP before it writes")
        b = lockcore.create("token", client, "stock:sku-1", ttl_ms=10_000, poll_ms=20)
        if not b.acquire(timeout=5 * TTL_MS / 1000):
            raise RuntimeError("B never got the lock: did A's TTL not run out?")
        b_read = read_stock(db)
        b_ok = sell_one(db, b_read, b.fencing_token or 0, fenced)
        narrator("A's TTL ran out; B acquires (token %s), reads %d, writes %d: %s",
                 b.fencing_token, b_read, b_read - 1, "ok" if b_ok else "refused")
        b.release()
        a.signal(signal.SIGCONT)
        narrator("A is resumed and writes the stock it computed before the pause")
        a_ok = a.expect("WROTE") == "1"
        narrator("A's write: %s", "LANDED (stale data over B's sale)" if a_ok
                 else "REFUSED by the fencing check (no row with last_token <= A's)")
        narrator("A's release: %s", a.expect("RELEASE"))
        a.proc.wait(timeout=10)
    final = read_stock(db)
    db.close()
    sales = 1 + int(a_ok)  # A confirms its sale only if its write landed
    narrator("final stock %d after %d sale%s: %s", final, sales, "s" if sales > 1 else "",
             "consistent" if final == STOCK - sales else "one unit sold twice")
    return {"stale_write_landed": a_ok, "final_stock": final, "sales": sales}


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (server, client), \
            tempfile.TemporaryDirectory(prefix="seckill-lab-") as tmp:
        narrator.section("no fencing: UPDATE stock SET qty = :qty")
        plain = _story(narrator, client, server.url, Path(tmp), fenced=False)
        narrator.section("fencing: UPDATE ... WHERE last_token <= :token")
        fenced = _story(narrator, client, server.url, Path(tmp), fenced=True)
    facts = {"unfenced": plain, "fenced": fenced}
    demonstrated = plain["stale_write_landed"] and not fenced["stale_write_landed"]
    line = (f"without fencing the paused holder's stale write "
            f"{'landed' if plain['stale_write_landed'] else 'did NOT land'} "
            f"({plain['sales']} sale{'s' if plain['sales'] != 1 else ''}, stock "
            f"{plain['final_stock']}); with fencing tokens it was "
            f"{'rejected' if not fenced['stale_write_landed'] else 'NOT rejected'}")
    return Verdict(demonstrated, line, facts)


def _child_main(url: str, db_path: str, fenced: str) -> int:
    """A: acquire, read, wait for the gate (where SIGSTOP freezes us), write, release."""
    import redis

    signal.alarm(MAX_LIFE_S)
    lock = lockcore.create("token", redis.Redis.from_url(url), "stock:sku-1", ttl_ms=TTL_MS)
    lock.acquire(timeout=10)
    db = sqlite3.connect(db_path)
    qty = read_stock(db)
    print(f"ACQUIRED {lock.fencing_token} READ {qty}", flush=True)
    sys.stdin.readline()
    ok = sell_one(db, qty, lock.fencing_token or 0, fenced == "1")
    print(f"WROTE {int(ok)}", flush=True)
    try:
        lock.release()
        print("RELEASED", flush=True)
    except lockcore.LockNotOwned as exc:
        print(f"RELEASE refused: {exc.message}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(*sys.argv[1:4]))
