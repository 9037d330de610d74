"""The partition lab's lock holder: a RedLock client living inside its own network namespace.

Run by the lab as ``ip netns exec <ns> python -m loadtest.labs.partition_holder
--urls U1,..,U5 --resource R --ttl-ms N``; it talks to the lab over its pipes, one
JSON object per line::

    -> {"event": "acquired", "validity_ms": .., "renew_every_ms": ..}   after acquire()
    <- check
    -> {"event": "check", "believes": .., "told_lost": .., "validity_left_ms": ..,
        "nodes": [..], "renewed": .., "renewals_failed": ..}
    <- exit

A holds the lock for long work, so it renews: ``extend()`` every ttl/3, as lockcore's
watchdog does. Unlike the watchdog it does not stop when a renewal fails (a program
that logs the error and carries on): it keeps renewing whatever nodes it still
reaches. Without a partition its keys never expire, on any node; with one, only the
island's two are renewed.

``believes`` is what a program that does not look would think: its handle still has a
token. ``told_lost`` is what lockcore told it: an ``extend()`` that reached no majority
marks the lock lost. ``validity_left_ms`` is RedLock's own answer (the validity of the
last renewal that reached a majority, minus the time since), ``renewed`` and
``renewals_failed`` count the renewals, and ``nodes`` is what each node says now
(``mine``, ``other``, ``none`` or ``unreachable``). It cannot outlive a lab that died:
``Island.spawn`` ties it to the lab with SIGKILL (``PR_SET_PDEATHSIG``). Its
``alarm()`` is only a safety net for where setpriv is missing, and fires only while the
process runs (not while it is stopped).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockcore
from lockcore.errors import LockError
from lockcore.strategies.redlock import RedLock

MAX_LIFE_S = 60


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def node_view(client: redis.Redis, key: str, token: str | None) -> str:
    """What one node says of ``key``: ``mine`` (holds ``token``), ``other``, ``none``, or
    ``unreachable``. The lab asks it of B's clients too."""
    try:
        value = client.get(key)
    except redis.RedisError:
        return "unreachable"
    if value is None:
        return "none"
    text = value.decode() if isinstance(value, bytes) else str(value)
    return "mine" if text == token else "other"


class Renewer:
    """``lock.extend()`` every ``interval`` seconds on a thread, failed or not."""

    def __init__(self, lock: lockcore.DistributedLock, interval: float) -> None:
        self.lock, self.interval = lock, interval
        self.renewed = self.failed = 0
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="partition-holder-renewer", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.lock.extend()
                self.renewed += 1
            except LockError:  # no majority answered: lockcore marks the lock lost
                self.failed += 1

    def stop(self) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--ttl-ms", type=int, required=True)
    args = parser.parse_args(argv)
    signal.alarm(MAX_LIFE_S)
    # lockcore's "lock lost" warning would land unstamped in the lab's output: the lab
    # reports it itself, from ``told_lost`` and the renewal counts
    logging.getLogger("lockcore").setLevel(logging.ERROR)
    clients = [redis.Redis.from_url(url, socket_timeout=0.3, socket_connect_timeout=0.3,
                                    retry=Retry(NoBackoff(), 0))
               for url in args.urls.split(",")]
    lock = lockcore.create("redlock", clients, args.resource, ttl_ms=args.ttl_ms)
    assert isinstance(lock, RedLock)
    if not lock.acquire(blocking=True, timeout=5):
        emit(event="failed")
        return 1
    renewer = Renewer(lock, args.ttl_ms / 3000)
    emit(event="acquired", validity_ms=round(lock.validity_ms),
         renew_every_ms=round(renewer.interval * 1000))
    for line in sys.stdin:
        if line.strip() == "check":
            emit(event="check", believes=lock.token is not None, told_lost=lock.lost,
                 validity_left_ms=round(lock.remaining_validity_ms()),
                 renewed=renewer.renewed,
                 renewals_failed=renewer.failed,
                 nodes=[node_view(c, lock.key, lock.token) for c in clients])
        elif line.strip() == "exit":
            break
    renewer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
