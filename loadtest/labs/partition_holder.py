"""The partition lab's lock holder: a RedLock client living inside its own network namespace.

Run by the lab as ``ip netns exec <ns> python -m loadtest.labs.partition_holder
--urls U1,..,U5 --resource R --ttl-ms N``; it talks to the lab over its pipes, one
JSON object per line::

    -> {"event": "acquired", "validity_ms": ..}     after acquire()
    <- check
    -> {"event": "check", "believes": .., "validity_left_ms": .., "nodes": [..]}
    <- exit

``believes`` is what a program that does not look would think: its handle still has a
token. ``validity_left_ms`` is RedLock's own answer (validity at acquire minus the time
since), and ``nodes`` is what each node says now (``mine``, ``other``, ``none`` or
``unreachable``). It cannot outlive a lab that died: ``Island.spawn`` ties it to the lab
with SIGKILL (``PR_SET_PDEATHSIG``). Its ``alarm()`` is only a safety net for where
setpriv is missing, and fires only while the process runs (not while it is stopped).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockcore

MAX_LIFE_S = 60


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def node_view(client: redis.Redis, key: str, token: str | None) -> str:
    try:
        value = client.get(key)
    except redis.RedisError:
        return "unreachable"
    if value is None:
        return "none"
    text = value.decode() if isinstance(value, bytes) else str(value)
    return "mine" if text == token else "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--ttl-ms", type=int, required=True)
    args = parser.parse_args(argv)
    signal.alarm(MAX_LIFE_S)
    clients = [redis.Redis.from_url(url, socket_timeout=0.3, socket_connect_timeout=0.3,
                                    retry=Retry(NoBackoff(), 0))
               for url in args.urls.split(",")]
    lock = lockcore.create("redlock", clients, args.resource, ttl_ms=args.ttl_ms)
    if not lock.acquire(blocking=True, timeout=5):
        emit(event="failed")
        return 1
    acquired_at = time.monotonic()
    validity_ms = float(getattr(lock, "validity_ms", None) or args.ttl_ms)
    emit(event="acquired", validity_ms=round(validity_ms))
    for line in sys.stdin:
        if line.strip() == "check":
            left = validity_ms - (time.monotonic() - acquired_at) * 1000
            emit(event="check", believes=lock.token is not None,
                 validity_left_ms=round(left),
                 nodes=[node_view(c, lock.key, lock.token) for c in clients])
        elif line.strip() == "exit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
