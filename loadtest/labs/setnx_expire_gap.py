"""Lab: a crash between ``SETNX`` and ``EXPIRE`` leaves the lock forever (seed 003).

Seed 003's Java handler locks with ``setnx(key, key)`` and only then ``expire(key, 3)``:
two round trips. The holder is a child process that stops right after SETNX succeeded
(the ``crash_between`` hook of ``setnx-expire`` prints ``IN_GAP`` and waits); the lab
SIGKILLs it there. The key now exists with no TTL, PTTL -1, exactly as if ``setnx``
had no expiry at all, and a waiter gives up. For contrast, the same kill right after
``SET NX PX`` (one atomic command, the ``token`` lock) leaves a key that expires.
"""

from __future__ import annotations

from typing import Any

import lockcore

from .holder import hold
from .narration import Narrator, Verdict
from .servers import lab_client

TITLE = "SETNX then EXPIRE: a crash in between leaves the lock forever"
SEED = "003"

TTL_MS = 1_000
WAIT_S = 1.5


def _kill_in_gap(narrator: Narrator, client: Any, url: str) -> tuple[int, bool]:
    """Returns (PTTL after the crash, whether a waiter got the lock within WAIT_S)."""
    resource = "stock:sku-1"
    key = f"lock:{{{resource}}}"
    with hold("setnx-expire", url, resource, ttl_ms=TTL_MS, stop_in_gap=True) as holder:
        holder.expect("IN_GAP")
        narrator("A (pid %d): SETNX %s -> 1; PEXPIRE %d not sent yet", holder.pid, key,
                 TTL_MS)
        holder.kill()
        narrator("A is SIGKILLed between SETNX and PEXPIRE")
    pttl = int(client.pttl(key))
    narrator("PTTL %s = %d%s", key, pttl, " (no expiry: nothing will ever free it)"
             if pttl == -1 else "")
    waiter = lockcore.create("setnx-expire", client, resource, ttl_ms=TTL_MS, poll_ms=100)
    got = waiter.acquire(timeout=WAIT_S)
    narrator("B waited %.1f s (more than the %d ms TTL A meant to set): %s", WAIT_S, TTL_MS,
             "acquired" if got else "still locked")
    if got:
        waiter.release()
    return pttl, got


def _kill_after_atomic_set(narrator: Narrator, client: Any, url: str) -> int:
    resource = "stock:sku-2"
    with hold("token", url, resource, ttl_ms=TTL_MS) as holder:
        holder.expect("ACQUIRED")
        narrator("A (pid %d): SET NX PX %d -> OK, one command", holder.pid, TTL_MS)
        holder.kill()
        narrator("A is SIGKILLed at the same point")
    pttl = int(client.pttl(f"lock:{{{resource}}}"))
    narrator("PTTL = %d ms: the lock frees itself", pttl)
    return pttl


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (server, client):
        narrator.section("setnx-expire: SETNX, then PEXPIRE in a second round trip")
        gap_pttl, waiter_got = _kill_in_gap(narrator, client, server.url)
        narrator.section("token: SET NX PX, one atomic command")
        atomic_pttl = _kill_after_atomic_set(narrator, client, server.url)
    facts = {"pttl_after_crash_in_gap": gap_pttl, "waiter_acquired": waiter_got,
             "pttl_after_crash_with_set_nx_px": atomic_pttl}
    demonstrated = gap_pttl == -1 and not waiter_got and atomic_pttl > 0
    forever = " (forever)" if gap_pttl == -1 else ""
    line = (f"killed between SETNX and EXPIRE, the lock was left with PTTL {gap_pttl}{forever} "
            f"and a waiter {'got it' if waiter_got else 'could not get it'}; "
            f"with SET NX PX the same crash left PTTL {atomic_pttl} ms")
    return Verdict(demonstrated, line, facts)
