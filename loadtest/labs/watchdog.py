"""Lab: work three times longer than the TTL, kept safe by renewal; and what the holder
is told when renewal cannot reach Redis (seed 004's open question).

Act 1, no watchdog: A takes a token lock with ttl 800 ms and works 2.4 s. At 800 ms
the lock expires under A, rival B takes it, and A's release raises ``LockNotOwned``.
Act 2, ``watchdog=True``: the same work; the watchdog extends every ttl/3, B tries
every 50 ms and never gets in, and A releases cleanly.
Act 3, Redis stops answering (SIGSTOP on the server) while A works: renewals time out,
after a whole ttl without one the watchdog gives up and calls ``on_lost``; leaving
``with`` raises ``LockLost``. The holder is *told*; it is up to it to stop writing.
"""

from __future__ import annotations

import contextlib
import threading
import time

import lockcore
from lockcore.embedded import RedisServer
from lockcore.errors import LockLost, LockNotOwned

from .narration import Narrator, Verdict
from .servers import client_for, lab_client

TITLE = "long work past the TTL: renewal keeps it, losing Redis is reported"
SEED = "004"

TTL_MS = 800
WORK_S = 3 * TTL_MS / 1000
RIVAL_POLL_S = 0.05


def _work_while_rival_tries(narrator: Narrator,
                            rival: lockcore.DistributedLock) -> tuple[bool, int]:
    """A 'works' for WORK_S while B tries the lock every RIVAL_POLL_S; returns whether B
    got in, and how many times B tried.

    The tries are narrated, counted as they happened: act 2 showed A acquire and
    release and nothing of B, while its verdict said "with the watchdog it never did"
    (a labs audit)."""
    deadline = time.monotonic() + WORK_S
    tries = 0
    while time.monotonic() < deadline:
        tries += 1
        if rival.acquire(blocking=False):
            narrator("B acquires the lock while A is still working (fencing %s): two holders",
                     rival.fencing_token)
            time.sleep(max(0.0, deadline - time.monotonic()))
            rival.release()
            return True, tries
        time.sleep(RIVAL_POLL_S)
    narrator("B tried %d times while A worked (every %d ms): never got it", tries,
             RIVAL_POLL_S * 1000)
    return False, tries


def _long_work(narrator: Narrator, client: object,
               watchdog: bool) -> tuple[bool, int, bool]:
    """Returns (whether B got in, how many times B tried, whether A's release was
    refused)."""
    a = lockcore.create("token", client, "stock:sku-1", ttl_ms=TTL_MS, watchdog=watchdog)
    # B holds on to what it gets until A is done, so its ttl must outlast the work
    b = lockcore.create("token", client, "stock:sku-1", ttl_ms=4 * TTL_MS)
    a.acquire()
    try:
        narrator("A acquires (ttl %d ms, watchdog %s) and starts %.1f s of work",
                 TTL_MS, "on" if watchdog else "off", WORK_S)
        b_got_in, b_tries = _work_while_rival_tries(narrator, b)
    except BaseException:  # Ctrl-C: let go before the lab stops the server A's watchdog renews on
        with contextlib.suppress(Exception):  # the interrupt is what the user must see
            a.release()
        raise
    try:
        a.release()
        narrator("A finishes and releases cleanly")
        return b_got_in, b_tries, False
    except LockNotOwned as exc:
        narrator("A finishes; its release is refused: %s", exc)
        return b_got_in, b_tries, True


def _redis_goes_away(narrator: Narrator, server: RedisServer) -> tuple[bool, str, bool]:
    """Returns (on_lost called, its reason, whether leaving ``with`` raised LockLost)."""
    lost = threading.Event()
    reasons: list[str] = []

    def on_lost(lock: lockcore.DistributedLock, reason: str) -> None:
        reasons.append(reason)
        narrator("on_lost(%r): %s", lock.name, reason)
        lost.set()

    client = client_for(server, timeout=0.3)
    lock = lockcore.create("token", client, "stock:sku-1", ttl_ms=TTL_MS, watchdog=True,
                           on_lost=on_lost)
    raised = False
    try:
        with lock:
            narrator("A acquires with the watchdog and starts working")
            time.sleep(TTL_MS / 1000)
            server.pause()
            try:
                narrator("redis-server is frozen (SIGSTOP): renewals will time out")
                told = lost.wait(timeout=10 * TTL_MS / 1000)
            finally:  # Ctrl-C too: the release on the way out needs a server that answers
                server.resume()
            narrator("redis-server resumed; A was %s", "told" if told else "NOT told")
    except LockLost as exc:
        raised = True
        narrator("leaving `with` raises LockLost: %s", exc)
    finally:
        client.close()
    return lost.is_set(), reasons[0] if reasons else "", raised


def run(narrator: Narrator) -> Verdict:
    with lab_client(narrator) as (server, client):
        narrator.section("act 1: no watchdog")
        b_in_plain, _, refused_plain = _long_work(narrator, client, watchdog=False)
        narrator.section("act 2: watchdog=True")
        b_in_dog, b_tries_dog, refused_dog = _long_work(narrator, client, watchdog=True)
        narrator.section("act 3: Redis stops answering during the work")
        told, reason, raised = _redis_goes_away(narrator, server)
    facts = {"rival_got_in_without_watchdog": b_in_plain, "refused_without": refused_plain,
             "rival_got_in_with_watchdog": b_in_dog, "rival_tries_with_watchdog": b_tries_dog,
             "refused_with": refused_dog,
             "on_lost_called": told, "lost_reason": reason, "with_raised_lock_lost": raised}
    # a rival that never tried proves nothing about the watchdog
    demonstrated = (b_in_plain and refused_plain and not b_in_dog and b_tries_dog > 0
                    and not refused_dog and told and raised)
    line = (f"{WORK_S:.1f}s of work under a {TTL_MS} ms ttl: without renewal a rival "
            f"{'got in' if b_in_plain else 'did not get in'}, with the watchdog it "
            f"{'got in' if b_in_dog else f'never did in {b_tries_dog} tries'}; when Redis "
            f"froze, the holder "
            f"{'was told (on_lost, LockLost)' if told and raised else 'was NOT told'}")
    return Verdict(demonstrated, line, facts)
