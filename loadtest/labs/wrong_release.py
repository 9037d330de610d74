"""Lab: a slow holder's plain ``DEL`` frees someone else's lock; the token lock refuses
(seed 002, second problem).

Seed 002's lock is ``SETNX`` + an expiry + ``DEL`` to unlock (``setnx-expire`` here).
The timeline: A takes the lock with a short TTL and is slow; the lock expires under
it; B takes it; A finishes and runs ``DEL``, which deletes *B's* key; C takes the
lock while B is still working. Two holders, and the culprit (A) never noticed.

The ``token`` lock stores a random value per acquisition and releases with a Lua
compare-and-delete: A's release finds B's token, deletes nothing and raises
``LockNotOwned``, and C is kept out. The lab runs both handles in one thread in a fixed
order, so the interleaving is exact, not a race we hope to win.
"""

from __future__ import annotations

import time
from typing import Any

import lockcore

from .narration import Narrator, Verdict
from .servers import lab_client

TITLE = "a slow holder's DEL frees the next holder's lock; the token lock refuses"
SEED = "002"

TTL_MS = 300
#: B and C hold long enough to finish the story; A's short TTL is the point
LONG_TTL_MS = 10_000


def _wait_until_expired(client: Any, key: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while client.exists(key):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key} did not expire within {timeout}s")
        time.sleep(0.02)


def _story(narrator: Narrator, client: Any, strategy: str) -> tuple[bool, bool, bool]:
    """Returns (B got the lock after it expired under A, A's release was refused, C got
    the lock while B held it). C counts as a second holder only if B holds the lock:
    unchecked, a B that never got it still read as "two holders"."""
    resource = f"stock:{strategy}"
    a = lockcore.create(strategy, client, resource, ttl_ms=TTL_MS)
    b = lockcore.create(strategy, client, resource, ttl_ms=LONG_TTL_MS)
    c = lockcore.create(strategy, client, resource, ttl_ms=LONG_TTL_MS)
    a.acquire(blocking=False)
    narrator("A acquires (ttl %d ms) and is slow", TTL_MS)
    _wait_until_expired(client, a.key)
    narrator("the lock expires under A")
    b_got = b.acquire(blocking=False)
    narrator("B acquires and starts working" if b_got else "B could NOT acquire")
    refused = False
    try:
        a.release()
        narrator("A finishes and releases: the key is %s",
                 "still B's" if client.exists(a.key) else "GONE (A deleted B's lock)")
    except lockcore.LockNotOwned as exc:
        refused = True
        narrator("A's release is refused (LockNotOwned: %s); B's key is untouched", exc.message)
    c_got = c.acquire(blocking=False)
    two_holders = b_got and c_got
    narrator("C tries the lock while B works: %s", "ACQUIRED, B and C both hold it"
             if two_holders else "acquired, but B held nothing" if c_got
             else "refused, B still holds it")
    for handle in [h for h, got in ((c, c_got), (b, b_got)) if got]:
        try:
            handle.release()
        except lockcore.LockNotOwned:
            pass
    return b_got, refused, two_holders


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (_, client):
        narrator.section("setnx-expire: SETNX + EXPIRE, release is a plain DEL")
        plain_b_held, plain_refused, plain_two_holders = _story(narrator, client,
                                                                "setnx-expire")
        narrator.section("token: random value, compare-and-delete release")
        token_b_held, token_refused, token_two_holders = _story(narrator, client, "token")
    facts = {"plain_b_held": plain_b_held, "token_b_held": token_b_held,
             "plain_del_refused": plain_refused, "plain_two_holders": plain_two_holders,
             "token_release_refused": token_refused, "token_two_holders": token_two_holders}
    demonstrated = (plain_b_held and token_b_held and not plain_refused
                    and plain_two_holders and token_refused and not token_two_holders)
    line = (f"plain DEL: A freed B's lock and C got in "
            f"({'two holders' if plain_two_holders else 'NOT reproduced'}); token: A's "
            f"release {'raised LockNotOwned' if token_refused else 'was NOT refused'} and "
            f"C {'got in' if token_two_holders else 'was kept out'}")
    return Verdict(demonstrated, line, facts)
