"""Lock holders that run in their own process, so tests can kill, pause and count them.

Run as ``python -m tests.lockcore.holders '<json spec>'``. The spec names a ``mode``, a
``strategy``, a ``backend`` (``{"redis": url}``, ``{"redlock": [urls]}``,
``{"zookeeper": hosts}`` or null for ``local``), a ``resource`` and lock ``options``.
Each process reports on stdout, one JSON object a line, and takes orders on stdin.

* ``hold``       acquire, report ``{"held": true, "t": monotonic, "fence": n}``, then
                 obey stdin lines: ``check`` reports ``held()`` and what ``release()``
                 raised; ``release`` releases; EOF exits (without releasing).
* ``window``     setnx-expire only: report ``{"window": true}`` between SETNX and EXPIRE,
                 then sleep in that gap until killed.
* ``exclusion``  wait for a ``go`` line, then ``rounds`` acquisitions; each critical
                 section records (start_ns, end_ns, fencing token) with the system-wide
                 CLOCK_MONOTONIC; write them as JSON to ``out`` at the end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import lockcore


def build_backend(spec: Any) -> Any:
    if spec is None:
        return None
    import redis

    if "redis" in spec:
        return redis.Redis.from_url(spec["redis"])
    if "redlock" in spec:
        return [redis.Redis.from_url(url, socket_timeout=0.5) for url in spec["redlock"]]
    return spec["zookeeper"]


def report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def hold(lock: lockcore.DistributedLock) -> None:
    assert lock.acquire(timeout=10)
    report(held=True, t=time.monotonic(), fence=lock.fencing_token)
    for line in sys.stdin:
        order = line.strip()
        if order == "check":
            held = lock.held()
            try:
                lock.release()
                outcome = "released"
            except lockcore.LockNotOwned as exc:
                outcome = type(exc).__name__
            report(held=held, release=outcome, lost=lock.lost)
        elif order == "release":
            lock.release()
            report(released=True)


def exclusion(lock: lockcore.DistributedLock, rounds: int, out: str) -> None:
    sys.stdin.readline()  # the start barrier: every worker is up before anyone competes
    sections = []
    for _ in range(rounds):
        assert lock.acquire(timeout=60)
        start = time.monotonic_ns()
        time.sleep(0.0002)  # a section long enough for an intruder to land inside it
        end = time.monotonic_ns()
        sections.append((start, end, lock.fencing_token))
        lock.release()
    with open(out, "w") as f:
        json.dump(sections, f)


def main(raw: str) -> None:
    spec = json.loads(raw)
    options = spec.get("options", {})
    mode = spec["mode"]
    if mode == "window":
        options["crash_between"] = lambda: report(window=True)
        options["gap_s"] = 60.0
    lock = lockcore.create(spec["strategy"], build_backend(spec.get("backend")),
                           spec.get("resource", "res"), **options)
    if mode == "hold":
        hold(lock)
    elif mode == "window":
        lock.acquire(blocking=False)
    elif mode == "exclusion":
        exclusion(lock, spec["rounds"], spec["out"])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])
