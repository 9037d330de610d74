"""Lab: the holder of a ``setnx`` lock is SIGKILLed and everyone waits; a ``token``
lock's TTL frees itself (seed 002, first problem).

A real crash runs no ``finally``: the holder is a child process and the lab sends it
SIGKILL while it holds the lock. A waiter then tries for ``WAIT_S``. With ``setnx`` the
key has no expiry (PTTL -1), the waiter gives up, and the key is still there afterwards:
the sale would be stuck until a human deletes it. With ``token`` (``SET NX PX``) the
same crash costs at most ``TTL_MS``: the waiter gets the lock.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import lockcore

from .holder import hold
from .narration import Narrator, Verdict
from .servers import lab_client

TITLE = "a holder crashes: setnx blocks everyone forever, a TTL recovers"
SEED = "002"

TTL_MS = 1_000
#: how long the waiter tries; "forever" in a lab is bounded
WAIT_S = 2.0


def _crash_and_wait(narrator: Narrator, client: Any, url: str, strategy: str,
                    ttl_ms: int | None) -> tuple[bool, int, float]:
    """Returns (waiter acquired, PTTL right after the crash, seconds the waiter waited)."""
    resource = f"stock:sku-{strategy}"
    with hold(strategy, url, resource, ttl_ms=ttl_ms) as holder:
        holder.expect("ACQUIRED")
        narrator("A (pid %d) acquires the %s lock", holder.pid, strategy)
        status = holder.kill()
        narrator("A is SIGKILLed while holding it (exit status %d): no finally, no release",
                 status)
    assert status == -signal.SIGKILL
    pttl = int(client.pttl(f"lock:{{{resource}}}"))
    narrator("PTTL of the lock key: %d%s", pttl, " (no expiry)" if pttl == -1 else " ms")
    waiter = lockcore.create(strategy, client, resource, ttl_ms=ttl_ms, poll_ms=100)
    narrator("B waits up to %.1f s for the lock", WAIT_S)
    started = time.monotonic()
    got = waiter.acquire(timeout=WAIT_S)
    waited = time.monotonic() - started
    if got:
        narrator("B acquires after %.0f ms: the crashed holder's TTL ran out", waited * 1000)
        waiter.release()
    else:
        narrator("B gives up after %.0f ms; the key is still there: %s", waited * 1000,
                 bool(client.exists(f"lock:{{{resource}}}")))
    return got, pttl, waited


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (server, client):
        narrator.section("setnx: SETNX + DEL, no expiry")
        setnx_got, setnx_pttl, _ = _crash_and_wait(narrator, client, server.url, "setnx", None)
        narrator.section(f"token: SET NX PX {TTL_MS}")
        token_got, token_pttl, token_wait = _crash_and_wait(narrator, client, server.url,
                                                            "token", TTL_MS)
    facts = {"setnx_waiter_acquired": setnx_got, "setnx_pttl": setnx_pttl,
             "token_waiter_acquired": token_got, "token_pttl": token_pttl,
             "token_wait_s": round(token_wait, 3)}
    demonstrated = not setnx_got and setnx_pttl == -1 and token_got and token_pttl > 0
    line = (f"after SIGKILL of the holder, setnx left the lock with PTTL {setnx_pttl} and the "
            f"waiter {'got it' if setnx_got else f'gave up after {WAIT_S:.0f}s'}; token "
            f"{'recovered' if token_got else 'did NOT recover'} once its {TTL_MS} ms TTL ran "
            f"out (waited {token_wait * 1000:.0f} ms)")
    return Verdict(demonstrated, line, facts)
