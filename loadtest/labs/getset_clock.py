"""Lab: the GETSET timestamp lock trusts every client's clock (seed 003).

The lock's value is an expiry time computed by the *client* (``now + ttl``), and every
other client decides "the holder is dead" by comparing it with *its own* clock.

Act 1, clock skew: A holds the lock with 5 s to go. B's clock runs 60 s ahead: to B the
timestamp is long past, so B's GETSET takes a live lock. Two holders; Redis did nothing
wrong. A B with a correct clock is refused.

Act 2, the takeover race after a real crash. Seed 003's first recipe recovers a dead
holder's lock with ``DEL`` + ``SETNX``: B and C both see it expired, B deletes and
takes it, then C deletes *B's* fresh lock and takes it too. That act is an
illustration, not an experiment: it replays raw commands in that exact order, so
Redis gives two holders every time, and the verdict does not count it as evidence
(its fact is ``del_setnx_replay_two_holders``). ``GETSET`` closes that hole: only the client whose
GETSET returns the expired value wins. But the loser's GETSET has already written its
own timestamp over the winner's, so the winner's "is it still mine?" check fails and
the lock's lifetime now follows the loser's clock (the ``between_get_and_getset`` hook
lets C in at that exact moment).
"""

from __future__ import annotations

import time
from typing import Any

import lockcore

from .narration import Narrator, Verdict
from .servers import lab_client

TITLE = "GETSET timestamp lock: a fast client clock takes a live lock; the takeover race"
SEED = "003"

TTL_MS = 5_000
SKEW_S = 60.0
CRASHED_TTL_MS = 200
DRIFT_S = 0.5


def _skewed_clock_takes_live_lock(narrator: Narrator, client: Any) -> tuple[bool, bool]:
    """Returns (B with a correct clock got it, B with a fast clock got it)."""
    a = lockcore.create("getset", client, "stock:skew", ttl_ms=TTL_MS)
    a.acquire(blocking=False)
    narrator("A acquires: value = A's now + %d ms = %d", TTL_MS, a.expiry_ms)  # type: ignore[attr-defined]
    honest = lockcore.create("getset", client, "stock:skew", ttl_ms=TTL_MS)
    honest_got = honest.acquire(blocking=False)
    narrator("B (correct clock) tries: %s", "ACQUIRED" if honest_got else "refused, A holds it")
    fast = lockcore.create("getset", client, "stock:skew", ttl_ms=TTL_MS, clock_skew_s=SKEW_S)
    fast_got = fast.acquire(blocking=False)
    narrator("B' (clock %+.0f s) reads A's timestamp as %.0f s in the past: %s", SKEW_S,
             SKEW_S - TTL_MS / 1000, "ACQUIRED, A and B' both hold it" if fast_got
             else "refused")
    narrator("A is not told: it only learns if it asks Redis again before it writes")
    client.delete(a.key)
    return honest_got, fast_got


def _del_setnx_race(narrator: Narrator, client: Any) -> bool:
    """Seed 003's first recovery recipe, replayed step by step; True if both B and C
    hold it, which the fixed order of the commands makes sure of (an illustration)."""
    key = "lock:{stock:race-del}"
    client.set(key, int(time.time() * 1000) - 1)  # a dead holder's expired timestamp
    narrator("a crashed holder left an expired timestamp in %s", key)
    narrator("B: GET -> expired;  C: GET -> expired")
    client.delete(key)
    b_got = bool(client.setnx(key, int(time.time() * 1000) + TTL_MS))
    narrator("B: DEL, SETNX -> %d (B holds it)", b_got)
    client.delete(key)  # C acts on its stale GET: this deletes B's live lock
    c_got = bool(client.setnx(key, int(time.time() * 1000) + TTL_MS))
    narrator("C: DEL (B's fresh lock!), SETNX -> %d%s", c_got,
             " : B and C both hold it" if b_got and c_got else "")
    client.delete(key)
    return b_got and c_got


def _getset_race(narrator: Narrator, client: Any) -> tuple[bool, bool, bool]:
    """Returns (B got it, C got it, C's held() after B's GETSET)."""
    dead = lockcore.create("getset", client, "stock:race", ttl_ms=CRASHED_TTL_MS)
    dead.acquire(blocking=False)
    narrator("A acquires (ttl %d ms) and dies without releasing", CRASHED_TTL_MS)
    time.sleep(CRASHED_TTL_MS / 1000 + 0.05)
    c = lockcore.create("getset", client, "stock:race", ttl_ms=TTL_MS)
    c_got: list[bool] = []

    def c_gets_in_first() -> None:
        narrator("B: GET -> expired; before B's GETSET, C runs the whole recipe")
        c_got.append(c.acquire(blocking=False))
        narrator("C: GETSET -> the expired value: C holds it (expiry %d)", c.expiry_ms)  # type: ignore[attr-defined]

    # B's clock is a little ahead (NTP drift), so the timestamp it writes over C's differs
    # from C's by a known amount even when both run within the same millisecond
    b = lockcore.create("getset", client, "stock:race", ttl_ms=TTL_MS,
                        clock_skew_s=DRIFT_S, between_get_and_getset=c_gets_in_first)
    b_got = b.acquire(blocking=False)
    stored = int(client.get(b.key))
    narrator("B: GETSET -> C's timestamp, not expired: B %s; but the key now holds B's "
             "timestamp %d, %+d ms from C's", "ACQUIRED" if b_got else "backs off", stored,
             stored - (c.expiry_ms or 0))  # type: ignore[attr-defined]
    c_held = c.held()
    narrator("C asks held(): %s (its expiry %s the stored one)", c_held,
             "matches" if c_held else "no longer matches")
    client.delete(b.key)
    return b_got, bool(c_got and c_got[0]), c_held


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (_, client):
        narrator.section(f"act 1: a client whose clock runs {SKEW_S:+.0f} s ahead")
        honest_got, fast_got = _skewed_clock_takes_live_lock(narrator, client)
        narrator.section("act 2a: recovering a dead holder with DEL + SETNX")
        both_hold = _del_setnx_race(narrator, client)
        narrator.section("act 2b: recovering it with GETSET")
        b_got, c_got, c_held = _getset_race(narrator, client)
    facts = {"correct_clock_acquired": honest_got, "fast_clock_acquired": fast_got,
             "del_setnx_replay_two_holders": both_hold, "getset_loser_acquired": b_got,
             "getset_winner_acquired": c_got, "winner_still_sees_its_lock": c_held}
    # the evidence: the acts that run real locks. The DEL + SETNX replay is left out:
    # its fixed order of raw commands gives two holders by Redis's semantics alone
    demonstrated = fast_got and not honest_got and c_got and not b_got and not c_held
    line = (f"a client {SKEW_S:+.0f}s ahead {'took' if fast_got else 'did NOT take'} a live "
            f"lock; DEL+SETNX recovery, replayed step by step, gives "
            f"{'two holders' if both_hold else 'one holder?!'}; "
            f"GETSET gave one holder but the loser overwrote its expiry "
            f"({'winner lost track' if not c_held else 'NOT reproduced'})")
    return Verdict(demonstrated, line, facts)
